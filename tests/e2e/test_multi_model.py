"""Several models in one tokenmill-server (--model [NAME=]PATH given more than once, and
--models-dir), driven over gRPC:
- the default model (SmolLM2), stories260K and a LoRA adapter of the default model (written by
  tests/reference/make_lora_adapter.py) each answer by name with llama.cpp's greedy tokens
  (llama-cpp-python fed one token at a time, with lora_path for the adapter; SmolLM2 Q4_1 up to
  llama.cpp's near-ties, as test_lora.py), alone and in one batch of streams of all three;
- Tokenize, Detokenize and GetModelInfo answer for the model named, ModelInfo.models lists
  every model (the default first), an unknown name is NOT_FOUND;
- --models-dir serves each *.gguf directly in it, by its file name without .gguf;
- --model-memory: two models whose files (and the KV limit they share, once) together exceed it
  load and unload in turn under one concurrent client per model, no request failing, never
  both resident; a model that alone exceeds it is refused at startup;
- --model-idle-timeout unloads an idle model (tokenmill:model_loaded 0) that only
  GetModelInfo(loaded_only) asks about, which then answers UNAVAILABLE; the next request
  loads it again."""
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from gguf import GGUFReader
from llama_cpp import Llama
from prometheus_client.parser import text_string_to_metric_families

from llama_reference import llama_cpp_greedy
from process_harness import RPC_TIMEOUT_S
from server_harness import DEFAULT_MODEL, REPO, SERVER_BIN, TINY_MODEL, Server, generate, pb2
from test_lora import EXACT_NEAR_TIE, NEAR_TIE, PROMPTS as SMOL_PROMPTS

sys.path.insert(0, str(REPO / "tests" / "reference"))
from make_lora_adapter import write_adapter  # noqa: E402

DEFAULT_ID = DEFAULT_MODEL.stem  # "SmolLM2-135M-Instruct.Q4_1": the file's name
TINY_ID = TINY_MODEL.stem  # "stories260K"
ADAPTER = "smol-a"
MAX_TOKENS = 12
TINY_PROMPTS = [[1, 50, 60, 70, 80, 90, 100], [1, 403, 407, 261, 378, 432, 383]]
PROMPTS = {"": SMOL_PROMPTS, DEFAULT_ID: SMOL_PROMPTS, ADAPTER: SMOL_PROMPTS,
           TINY_ID: TINY_PROMPTS}
TEXT = "Once upon a time, there was a little girl named Lily."
MiB = 1 << 20
KV_MEMORY_MIB = 16  # --kv-cache-memory of the servers that set --model-memory


def request(prompt, model, max_tokens=MAX_TOKENS):
    return pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=prompt), max_tokens=max_tokens,
                               ignore_eos=True, model=model)


def model_metrics(server):
    """{(sample name, model_name): value} of the per-model samples of /metrics:
    tokenmill:model_loaded, tokenmill:model_loads_total, tokenmill:model_unloads_total, and
    each loaded model's engine (requests running and waiting, KV usage, tokens generated)."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    wanted = ("tokenmill:model_loaded", "tokenmill:model_loads_total",
              "tokenmill:model_unloads_total", "tokenmill:num_requests_running",
              "tokenmill:num_requests_waiting", "tokenmill:kv_cache_usage_perc",
              "tokenmill:generation_tokens_total", "tokenmill:e2e_request_latency_seconds_count",
              "tokenmill:request_success_total")
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in wanted:  # summed over other labels (request_success's reasons)
                key = (s.name, s.labels.get("model_name"))
                samples[key] = samples.get(key, 0) + s.value
    return samples


def loaded(metrics, model):
    return metrics.get(("tokenmill:model_loaded", model))


def wait_for_model_metrics(server, predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        metrics = model_metrics(server)
        if predicate(metrics):
            return metrics
        assert time.monotonic() < deadline, f"metrics never matched; last: {metrics}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    if not DEFAULT_MODEL.exists() or not TINY_MODEL.exists():
        pytest.skip(f"{DEFAULT_MODEL} or {TINY_MODEL} is missing: run scripts/setup")
    path = tmp_path_factory.mktemp("multi-model") / f"{ADAPTER}.gguf"
    write_adapter(str(DEFAULT_MODEL), str(path), rank=16, alpha=32, seed=0)
    return path


@pytest.fixture(scope="module")
def server(adapter):
    """The default model, stories260K and an adapter of the default model, no memory limit."""
    with Server("--model", TINY_MODEL, "--lora", f"{ADAPTER}={adapter}",
                model=DEFAULT_MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def lone(server):
    """{(model, prompt): greedy tokens} of each model and prompt run alone."""
    return {(name, tuple(p)): generate(server.stub, request(p, name))[0]
            for name, prompts in PROMPTS.items() for p in prompts}


def test_each_model_by_name_equals_llama_cpp(server, adapter, lone):
    references = [(DEFAULT_ID, DEFAULT_MODEL, None, NEAR_TIE),
                  (TINY_ID, TINY_MODEL, None, EXACT_NEAR_TIE),
                  (ADAPTER, DEFAULT_MODEL, adapter, NEAR_TIE)]
    for name, path, lora, near_tie in references:
        for prompt in PROMPTS[name]:
            got = lone[(name, tuple(prompt))]
            want, gaps = llama_cpp_greedy(path, prompt, MAX_TOKENS, lora_path=lora)
            if got == want:
                continue
            k = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            assert gaps[k] < near_tie, (
                f"model {name!r}: token {k} is {got[k]}, llama.cpp's {want[k]} "
                f"(gap {gaps[k]:.3g})")
    for prompt in SMOL_PROMPTS:  # the default model by its name and by none
        assert lone[("", tuple(prompt))] == lone[(DEFAULT_ID, tuple(prompt))]
        assert lone[(ADAPTER, tuple(prompt))] != lone[("", tuple(prompt))]


def test_streams_of_every_model_at_once_equal_their_lone_runs(server, lone):
    jobs = [(name, p) for name, prompts in PROMPTS.items() for p in prompts] * 2
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        together = list(pool.map(
            lambda job: generate(server.stub, request(job[1], job[0]))[0], jobs))
    for (name, p), got in zip(jobs, together):
        assert got == lone[(name, tuple(p))], f"model {name!r} differs beside the others"


def test_metrics_show_each_models_engine_and_requests(server, lone):
    """Every family once (prometheus_client parses it), each model's samples by model_name."""
    tiny_runs = len(PROMPTS[TINY_ID])
    before = model_metrics(server)
    prompt = PROMPTS[TINY_ID][0]
    assert generate(server.stub, request(prompt, TINY_ID))[0] == lone[(TINY_ID, tuple(prompt))]
    latency = "tokenmill:e2e_request_latency_seconds_count"
    # The engine's gauges follow its next step.
    metrics = wait_for_model_metrics(server, lambda m: m[(latency, TINY_ID)] > before[
        (latency, TINY_ID)] and m[("tokenmill:num_requests_running", TINY_ID)] == 0)
    for name in (DEFAULT_ID, TINY_ID):
        assert metrics[("tokenmill:model_loaded", name)] == 1
        assert metrics[("tokenmill:num_requests_running", name)] == 0
        assert metrics[("tokenmill:num_requests_waiting", name)] == 0
        assert 0 <= metrics[("tokenmill:kv_cache_usage_perc", name)] < 1
    # lone's runs at least (the adapter's run on the default model's engine).
    assert metrics[("tokenmill:generation_tokens_total", TINY_ID)] >= MAX_TOKENS * tiny_runs
    default_tokens = sum(len(lone[(name, tuple(p))]) for name, prompts in PROMPTS.items()
                         if name != TINY_ID for p in prompts)
    assert metrics[("tokenmill:generation_tokens_total", DEFAULT_ID)] >= default_tokens
    # Requests count where their model's are: one more of tiny's, none of the default's.
    assert metrics[(latency, TINY_ID)] == before[(latency, TINY_ID)] + 1 >= tiny_runs + 1
    assert metrics[(latency, DEFAULT_ID)] == before[(latency, DEFAULT_ID)]
    for name in (DEFAULT_ID, TINY_ID):
        assert metrics[("tokenmill:request_success_total", name)] == metrics[(latency, name)]


def test_model_info_lists_every_model_and_answers_for_the_one_named(server):
    default = server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
    assert list(default.models) == [DEFAULT_ID, TINY_ID]
    assert list(default.lora_adapters) == [ADAPTER]
    assert default.name == DEFAULT_ID and default.vocab_size == 49152
    by_name = server.stub.GetModelInfo(pb2.GetModelInfoRequest(model=DEFAULT_ID),
                                       timeout=RPC_TIMEOUT_S)
    assert by_name.name == DEFAULT_ID and by_name.vocab_size == default.vocab_size
    tiny = server.stub.GetModelInfo(pb2.GetModelInfoRequest(model=TINY_ID),
                                    timeout=RPC_TIMEOUT_S)
    reader = GGUFReader(str(TINY_MODEL))
    assert tiny.name == TINY_ID and list(tiny.served_model_names) == [TINY_ID]
    assert tiny.architecture == "llama"
    assert tiny.vocab_size == len(reader.fields["tokenizer.ggml.tokens"].contents()) == 512
    assert tiny.context_length == reader.fields["llama.context_length"].contents()
    assert tiny.max_model_len == tiny.context_length
    assert tiny.tokenizer_model == "llama"
    assert tiny.embedding_length == reader.fields["llama.embedding_length"].contents()
    assert list(tiny.models) == [DEFAULT_ID, TINY_ID]


def test_tokenize_and_detokenize_use_the_named_models_vocabulary(server):
    want = Llama(model_path=str(TINY_MODEL), vocab_only=True, verbose=False).tokenize(
        TEXT.encode(), add_bos=True, special=False)
    tiny = server.stub.Tokenize(pb2.TokenizeRequest(text=TEXT, model=TINY_ID),
                                timeout=RPC_TIMEOUT_S)
    assert list(tiny.token_ids) == want
    tiny_info = server.stub.GetModelInfo(pb2.GetModelInfoRequest(model=TINY_ID))
    assert tiny.max_model_len == tiny_info.max_model_len == 128
    smol = server.stub.Tokenize(pb2.TokenizeRequest(text=TEXT), timeout=RPC_TIMEOUT_S)
    assert list(smol.token_ids) != want
    assert smol.max_model_len == server.stub.GetModelInfo(
        pb2.GetModelInfoRequest()).max_model_len
    for name in (DEFAULT_ID, ADAPTER):  # an adapter has its base model's vocabulary
        again = server.stub.Tokenize(pb2.TokenizeRequest(text=TEXT, model=name),
                                     timeout=RPC_TIMEOUT_S)
        assert list(again.token_ids) == list(smol.token_ids), name
    back = server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=want, model=TINY_ID),
                                  timeout=RPC_TIMEOUT_S)
    assert back.text == TEXT
    # The tiny model's ids read with SmolLM2's vocabulary are another text.
    assert server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=want)).text != TEXT


def test_an_unknown_model_is_not_found(server):
    calls = {
        "Generate": lambda: generate(server.stub, request([1, 50, 60], "nope")),
        "Tokenize": lambda: server.stub.Tokenize(
            pb2.TokenizeRequest(text="Hi", model="nope"), timeout=RPC_TIMEOUT_S),
        "Detokenize": lambda: server.stub.Detokenize(
            pb2.DetokenizeRequest(token_ids=[50], model="nope"), timeout=RPC_TIMEOUT_S),
        "GetModelInfo": lambda: server.stub.GetModelInfo(
            pb2.GetModelInfoRequest(model="nope"), timeout=RPC_TIMEOUT_S),
    }
    for rpc, call in calls.items():
        with pytest.raises(grpc.RpcError) as error:
            call()
        assert error.value.code() == grpc.StatusCode.NOT_FOUND, rpc
        assert "nope" in error.value.details(), rpc
    with pytest.raises(grpc.RpcError) as error:
        generate(server.stub, request([1, 50, 60], "nope"))
    assert TINY_ID in error.value.details()  # says which names there are


def test_models_dir_serves_each_gguf_in_it_by_its_stem(tmp_path, lone):
    d = tmp_path / "models"
    (d / "sub").mkdir(parents=True)
    for name in ("alpha.gguf", "beta.gguf", "sub/gamma.gguf"):
        shutil.copy(TINY_MODEL, d / name)
    (d / "notes.txt").write_text("not a model")
    with Server("--models-dir", d, model=DEFAULT_MODEL) as server:
        models = list(server.stub.GetModelInfo(pb2.GetModelInfoRequest()).models)
        assert models[0] == DEFAULT_ID and sorted(models[1:]) == ["alpha", "beta"]
        metrics = model_metrics(server)
        assert loaded(metrics, DEFAULT_ID) == 1
        assert loaded(metrics, "alpha") == 0 and loaded(metrics, "beta") == 0  # on first use
        for name in ("alpha", "beta"):
            for prompt in TINY_PROMPTS:
                got = generate(server.stub, request(prompt, name))[0]
                assert got == lone[(TINY_ID, tuple(prompt))], name
        assert loaded(model_metrics(server), "alpha") == 1
        for name in ("gamma", "notes", "sub/gamma"):
            with pytest.raises(grpc.RpcError) as error:
                generate(server.stub, request(TINY_PROMPTS[0], name))
            assert error.value.code() == grpc.StatusCode.NOT_FOUND, name


def file_mib(path):
    return path.stat().st_size / MiB


def test_models_over_the_memory_limit_take_turns(lone):
    """Each model fits alone, both do not: a client per model, each sending requests back to
    back, makes them load and unload in turn; every request answers as it does alone.
    --model-memory counts the loaded models' files and, once, the KV limit they share."""
    big, small = file_mib(DEFAULT_MODEL), file_mib(TINY_MODEL)
    limit_kib = int((big + KV_MEMORY_MIB + small / 2) * 1024)  # half the tiny file short
    calls = 4
    with Server("--model", TINY_MODEL, "--kv-cache-memory", f"{KV_MEMORY_MIB}MiB",
                "--model-memory", f"{limit_kib}KiB", "--model-load-timeout", "600",
                model=DEFAULT_MODEL) as server:
        assert loaded(model_metrics(server), DEFAULT_ID) == 1
        assert loaded(model_metrics(server), TINY_ID) == 0
        results, errors, resident = [], [], []
        done = threading.Event()

        def client(name):
            try:
                for i in range(calls):
                    prompt = PROMPTS[name][i % 2]
                    got = generate(server.stub, request(prompt, name), timeout=600)[0]
                    results.append((name, prompt, got))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append((name, repr(e)))

        def watch():
            while not done.is_set():
                m = model_metrics(server)
                resident.append((loaded(m, DEFAULT_ID) or 0) + (loaded(m, TINY_ID) or 0))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        clients = [threading.Thread(target=client, args=(name,)) for name in (DEFAULT_ID, TINY_ID)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        done.set()
        watcher.join()
        assert not errors, f"{errors}; log:\n{server.log_text()[-6000:]}"
        assert len(results) == 2 * calls
        for name, prompt, got in results:
            assert got == lone[(name, tuple(prompt))], name
        assert max(resident) <= 1, "both models were resident at once"
        metrics = model_metrics(server)
        for name in (DEFAULT_ID, TINY_ID):
            assert metrics[("tokenmill:model_loads_total", name)] >= 1, (name, metrics)
            assert metrics[("tokenmill:model_unloads_total", name)] >= 1, (name, metrics)
        # Whichever ran last is the one resident now.
        assert loaded(metrics, DEFAULT_ID) + loaded(metrics, TINY_ID) == 1


@pytest.mark.parametrize("first,second", [(DEFAULT_MODEL, TINY_MODEL),
                                          (TINY_MODEL, DEFAULT_MODEL)],
                         ids=["default", "second"])
def test_a_model_over_the_memory_limit_alone_is_refused_at_startup(first, second):
    limit = int(file_mib(TINY_MODEL) + KV_MEMORY_MIB + 8)  # room for the tiny model alone
    assert limit < file_mib(DEFAULT_MODEL) + KV_MEMORY_MIB
    args = [str(SERVER_BIN), "--model", str(first), "--model", str(second), "--port", "0",
            "--metrics-port", "-1", "--kv-cache-memory", f"{KV_MEMORY_MIB}MiB",
            "--model-memory", f"{limit}MiB"]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"still running after 60 s; log:\n{e.stderr}") from None
    assert out.returncode != 0
    assert "--model-memory" in out.stderr + out.stdout
    assert DEFAULT_MODEL.stem in out.stderr + out.stdout  # names the model that does not fit


def test_an_idle_model_is_unloaded_and_loads_again(lone):
    with Server("--model", f"tiny={TINY_MODEL}", "--model-idle-timeout", "4",
                model=DEFAULT_MODEL) as server:
        info = server.stub.GetModelInfo(pb2.GetModelInfoRequest())
        assert list(info.models) == [DEFAULT_ID, "tiny"]
        assert loaded(model_metrics(server), "tiny") == 0
        prompt = TINY_PROMPTS[0]
        assert generate(server.stub, request(prompt, "tiny"))[0] == lone[(TINY_ID, tuple(prompt))]
        metrics = model_metrics(server)
        assert metrics[("tokenmill:model_loads_total", "tiny")] == 1
        assert loaded(metrics, "tiny") == 1
        # Unloaded after 4 s without requests (the gauge goes to 0 as the unload starts, the
        # counter counts it once the engine has stopped), however often a watcher asks for
        # its info with loaded_only, as gateways do at each health check.
        watching = pb2.GetModelInfoRequest(model="tiny", loaded_only=True)
        deadline = time.monotonic() + 60
        while loaded(model_metrics(server), "tiny") == 1:
            try:
                assert server.stub.GetModelInfo(watching).name == "tiny"
            except grpc.RpcError as error:
                # The unload began between the metrics' answer and this call.
                assert error.code() == grpc.StatusCode.UNAVAILABLE, error
                break
            assert time.monotonic() < deadline, "a loaded_only GetModelInfo kept tiny loaded"
            time.sleep(0.2)
        wait_for_model_metrics(server, lambda m: loaded(m, "tiny") == 0 and m[
            ("tokenmill:model_unloads_total", "tiny")] == 1)
        with pytest.raises(grpc.RpcError) as e:
            server.stub.GetModelInfo(watching)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert loaded(model_metrics(server), "tiny") == 0  # and it did not load it
        assert generate(server.stub, request(prompt, "tiny"))[0] == lone[(TINY_ID, tuple(prompt))]
        metrics = model_metrics(server)
        assert metrics[("tokenmill:model_loads_total", "tiny")] == 2
        assert loaded(metrics, "tiny") == 1
