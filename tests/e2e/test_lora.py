"""LoRA adapters (--lora NAME=PATH; a request names one as its model) against llama.cpp's own
(llama-cpp-python with lora_path, fed one token at a time), with adapters written by
tests/reference/make_lora_adapter.py (random low-rank pairs on every layer's attention and
feed-forward matrices):
- a tiny random llama (F32, stories260K's vocabulary) and the default model converted to F16 by
  llama.cpp's quantizer: greedy continuations equal llama.cpp's with each adapter and without;
- the default model itself (Q4_1), where tokenmill's logits sit as far from llama.cpp's as
  llama.cpp's own builds sit from each other (docs/fidelity.md: p99 0.81): equal up to a
  near-tie of llama.cpp's (NEAR_TIE);
- one batch of streams of the base model and two adapters at once: each equals its lone run
  bit for bit (the base matmuls shared, each stream's low-rank update its own);
- prefixes cached under one adapter are not served to another; an unknown model name is
  NOT_FOUND; bad adapter files are refused at startup by name;
- --metrics-compat vllm serves vllm:lora_requests_info with the adapters of running requests;
- --lora-weights q8_0 (A in 8-bit blocks, B in f16) stays within llama.cpp's near-ties on the
  default model."""
import ctypes
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import llama_cpp
import numpy as np
import pytest

from llama_reference import llama_cpp_greedy
from server_harness import DEFAULT_MODEL, REPO, SERVER_BIN, TINY_MODEL, Server, generate, pb2

sys.path.insert(0, str(REPO / "tests" / "reference"))
from make_lora_adapter import write_adapter  # noqa: E402
from tiny_families import llama  # noqa: E402

MAX_TOKENS = 12
NEAR_TIE = 0.9  # SmolLM2 Q4_1 (see the module's docstring)
EXACT_NEAR_TIE = 2e-3  # F32 weights: the sums' order alone
# F16 weights: both engines round the activations to f16 for the products, in their own sum
# orders; SmolLM2's final hidden states then differ by up to 0.01 (test_embeddings.py).
F16_NEAR_TIE = 0.05
PROMPTS = [[1, 504, 3458, 282, 253, 1345, 30, 3], [1, 9690, 198, 57, 5248, 3946, 288]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not TINY_MODEL.exists():
        pytest.skip(f"{TINY_MODEL} is missing: run scripts/setup")
    d = tmp_path_factory.mktemp("lora-tiny")
    base = d / "tiny-llama.gguf"
    llama.write(str(base), vocabulary_from=str(TINY_MODEL))
    adapters = {}
    for name, seed in (("a", 3), ("b", 4)):
        adapters[name] = d / f"tiny-{name}.gguf"
        write_adapter(str(base), str(adapters[name]), rank=4, alpha=8, seed=seed, gain=1.0)
    return base, adapters


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    if not DEFAULT_MODEL.exists():
        pytest.skip(f"{DEFAULT_MODEL} is missing: run scripts/setup")
    d = tmp_path_factory.mktemp("lora-smollm2")
    adapters = {}
    for name, seed in (("a", 0), ("b", 1)):
        adapters[name] = d / f"smollm2-{name}.gguf"
        write_adapter(str(DEFAULT_MODEL), str(adapters[name]), rank=16, alpha=32, seed=seed)
    return d, adapters


def lora_flags(adapters):
    flags = []
    for name, path in adapters.items():
        flags += ["--lora", f"{name}={path}"]
    return flags


def request(prompt, model=""):
    return pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=prompt), max_tokens=MAX_TOKENS,
                               ignore_eos=True, model=model)


def check_against_llama_cpp(server, base, adapters, prompts, near_tie):
    """Each model and adapter's lone greedy continuations against llama.cpp's."""
    departures = 0
    for name, path in [("", None), *adapters.items()]:
        for prompt in prompts:
            got = generate(server.stub, request(prompt, name))[0]
            want, gaps = llama_cpp_greedy(base, prompt, MAX_TOKENS, lora_path=path)
            if got == want:
                continue
            k = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            assert gaps[k] < near_tie, (
                f"model {name!r}: token {k} is {got[k]}, llama.cpp's {want[k]} (gap {gaps[k]:.3g})")
            departures += 1
    return departures


def test_tiny_adapters_equal_llama_cpp_alone_and_batched(tiny):
    base, adapters = tiny
    prompts = [[1, 50, 60, 70, 80, 90, 100], [1, 7, 300, 21, 99]]
    with Server(*lora_flags(adapters), model=base) as server:
        info = server.stub.GetModelInfo(pb2.GetModelInfoRequest())
        assert list(info.lora_adapters) == ["a", "b"]
        assert check_against_llama_cpp(server, base, adapters, prompts, EXACT_NEAR_TIE) == 0
        check_mixed_batch(server, prompts, ["", "a", "b"])


def test_an_f16_b_runs_as_its_values_in_f32(tiny, tmp_path):
    """An adapter whose B is F16 (convert_lora_to_gguf.py's default type) is kept in f16 and
    widened in the kernels: its tokens equal those of an F32 file of the same values, bit for
    bit, alone and batched with the base model; a different B would move them."""
    base, _ = tiny
    f16, twin = tmp_path / "b-f16.gguf", tmp_path / "b-f32-twin.gguf"
    write_adapter(str(base), str(f16), rank=4, alpha=8, seed=5, gain=1.0, b_dtype=np.float16)
    write_adapter(str(base), str(twin), rank=4, alpha=8, seed=5, gain=1.0, b_in_f16=True)
    prompts = [[1, 50, 60, 70, 80, 90, 100], [1, 7, 300, 21, 99]]
    with Server("--lora", f"f16={f16}", "--lora", f"twin={twin}", model=base) as server:
        for p in prompts:
            got = generate(server.stub, request(p, "f16"))[0]
            assert got == generate(server.stub, request(p, "twin"))[0]
            assert got != generate(server.stub, request(p))[0]
        check_mixed_batch(server, prompts, ["", "f16"])


def check_mixed_batch(server, prompts, models):
    """Streams of every model at once equal their lone runs bit for bit."""
    jobs = [(p, m) for p in prompts for m in models] * 2
    lone = {(tuple(p), m): generate(server.stub, request(p, m))[0] for p, m in jobs}
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        together = list(pool.map(lambda job: generate(server.stub, request(*job))[0], jobs))
    for (p, m), got in zip(jobs, together):
        assert got == lone[(tuple(p), m)], f"model {m!r} differs beside the others"
    assert len({tuple(lone[(tuple(prompts[0]), m)]) for m in models}) == len(models)


def test_smollm2_f16_adapters_equal_llama_cpp(smollm2):
    """The default model in F16 (llama.cpp's quantizer): no int8 activations between the two
    engines, so the adapters' updates are compared at a far smaller near-tie."""
    d, adapters = smollm2
    f16 = d / "smollm2-f16.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    assert llama_cpp.llama_model_quantize(str(DEFAULT_MODEL).encode(), str(f16).encode(),
                                          ctypes.byref(params)) == 0
    with Server(*lora_flags(adapters), model=f16) as server:
        check_against_llama_cpp(server, f16, adapters, PROMPTS, F16_NEAR_TIE)


def test_smollm2_adapters_equal_llama_cpp_up_to_its_near_ties(smollm2):
    _, adapters = smollm2
    with Server(*lora_flags(adapters)) as server:
        check_against_llama_cpp(server, DEFAULT_MODEL, adapters, PROMPTS, NEAR_TIE)
        check_mixed_batch(server, PROMPTS, ["", "a", "b"])


def test_prefixes_are_cached_per_adapter_and_names_are_checked(tiny):
    base, adapters = tiny
    prompt = [int(t) for t in np.random.default_rng(7).integers(3, 512, 40)]
    with Server(*lora_flags(adapters), model=base) as server:
        first = list(server.stub.Generate(request(prompt, "a")))[-1]
        assert first.usage.cached_prompt_tokens == 0
        again = list(server.stub.Generate(request(prompt, "a")))[-1]
        assert again.usage.cached_prompt_tokens >= 32
        other = list(server.stub.Generate(request(prompt, "b")))[-1]
        assert other.usage.cached_prompt_tokens == 0
        base_run = list(server.stub.Generate(request(prompt, "")))[-1]
        assert base_run.usage.cached_prompt_tokens == 0
        with pytest.raises(grpc.RpcError) as e:
            generate(server.stub, request(prompt, "c"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert "'a'" in e.value.details() and "'b'" in e.value.details()


@pytest.mark.parametrize("flag,message", [
    ("a", "give NAME=PATH"),
    ("a=/nonexistent.gguf", "/nonexistent.gguf"),
    ("a={base}", "is no adapter"),
])
def test_bad_adapters_are_refused_at_startup(tiny, flag, message):
    base, _ = tiny
    out = subprocess.run([str(SERVER_BIN), "--model", str(base), "--port", "0",
                          "--metrics-port", "-1", "--lora", flag.format(base=base)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert message in out.stderr + out.stdout


def test_vllm_lora_requests_info_names_the_running_adapters(tiny):
    base, adapters = tiny
    with Server(*lora_flags(adapters), "--metrics-compat", "vllm", model=base) as server:
        prompt = [1, 50, 60, 70]
        long = pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=prompt), max_tokens=250,
                                   ignore_eos=True, model="b")
        # The tiny model's request may end between two scrapes: requests one after another
        # until a scrape catches one running.
        stop = threading.Event()

        def requests():
            while not stop.is_set():
                generate(server.stub, long)

        worker = threading.Thread(target=requests)
        worker.start()
        seen = set()
        wanted = lambda name: "running_lora_adapters=b," in name and "max_lora=16" in name  # noqa: E731
        deadline = time.monotonic() + 60
        try:
            while not any(map(wanted, seen)) and time.monotonic() < deadline:
                seen |= {name for name in server.metrics()
                         if name.startswith("vllm:lora_requests_info")}
                time.sleep(0.01)
        finally:
            stop.set()
            worker.join()
    assert any(map(wanted, seen)), seen


def test_q8_0_adapter_weights_stay_within_llama_cpps_near_ties(smollm2):
    """--lora-weights q8_0 (A in 8-bit blocks, on the int8 kernels): on the default model,
    whose own weights and activations are already 4- and 8-bit, the adapters' continuations
    still equal llama.cpp's (f32 pairs) up to its near-ties, and batching changes nothing."""
    _, adapters = smollm2
    with Server(*lora_flags(adapters), "--lora-weights", "q8_0") as server:
        check_against_llama_cpp(server, DEFAULT_MODEL, adapters, PROMPTS, NEAR_TIE)
        check_mixed_batch(server, PROMPTS, ["", "a", "b"])
