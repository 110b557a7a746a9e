"""LoRA adapters loaded and unloaded while the server runs (--lora-dir; POST
/v1/load_lora_adapter and /v1/unload_lora_adapter on the metrics port behind --api-key, vLLM's
routes), on a tiny random llama (F32, stories260K's vocabulary) with adapters written by
tests/reference/make_lora_adapter.py:
- a loaded adapter is a model name at once: its greedy continuations equal llama.cpp's
  (llama-cpp-python with lora_path), beside the base model and another adapter in one batch;
- an unloaded one is NOT_FOUND for new requests while a stream already running with it ends
  as its lone run does; loaded again, it serves again;
- the gateway lists and routes it after its next health check, and forgets it after an unload;
- refused: no or a wrong key (401), a path outside --lora-dir, through `..`, an absolute path
  or a symbolic link, or a missing file (403, the same answer), a file that is no adapter
  (400), a name the model or another adapter has or more than --max-loras adapters (409),
  bad JSON (400), an unknown name to unload (404); the server serves on;
- startup refuses --lora-dir without --api-key or a metrics port, on a missing directory, and
  with several models."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest

from gateway_harness import Gateway, backend_address
from llama_reference import llama_cpp_greedy
from server_harness import DEFAULT_MODEL, REPO, SERVER_BIN, TINY_MODEL, Server, pb2

sys.path.insert(0, str(REPO / "tests" / "reference"))
from make_lora_adapter import write_adapter  # noqa: E402
from tiny_families import llama  # noqa: E402

KEY = "lora-admin-key"
AUTH = [("authorization", f"Bearer {KEY}")]
MAX_TOKENS = 12
EXACT_NEAR_TIE = 2e-3  # F32 weights: the sums' order alone
PROMPTS = [[1, 50, 60, 70, 80, 90, 100], [1, 7, 300, 21, 99]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(base model, the allowed directory with adapters a and b, an adapter outside it)."""
    if not TINY_MODEL.exists():
        pytest.skip(f"{TINY_MODEL} is missing: run scripts/setup")
    d = tmp_path_factory.mktemp("lora-runtime")
    base = d / "tiny-llama.gguf"
    llama.write(str(base), vocabulary_from=str(TINY_MODEL))
    allowed = d / "loras"
    allowed.mkdir()
    for name, seed in (("a", 3), ("b", 4)):
        write_adapter(str(base), str(allowed / f"{name}.gguf"), rank=4, alpha=8, seed=seed,
                      gain=1.0)
    outside = d / "outside.gguf"
    shutil.copy(allowed / "a.gguf", outside)
    os.symlink(outside, allowed / "link.gguf")
    shutil.copy(base, allowed / "not-an-adapter.gguf")
    return base, allowed, outside


def admin(server, route, body, key=KEY):
    """(HTTP status, JSON answer) of an admin route."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{server.metrics_port}{route}",
                                     data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, (json.loads(text) if text.startswith("{") else text)


def load(server, name, path, **kw):
    return admin(server, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)},
                 **kw)


def unload(server, name):
    return admin(server, "/v1/unload_lora_adapter", {"lora_name": name})


def runtime_server(allowed, base, *extra):
    return Server("--lora-dir", allowed, "--api-key", KEY, *extra, model=base)


def request(prompt, model="", max_tokens=MAX_TOKENS):
    return pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=prompt), max_tokens=max_tokens,
                               ignore_eos=True, model=model)


def run(server, prompt, model="", max_tokens=MAX_TOKENS):
    """The greedy tokens of one Generate stream."""
    stream = server.stub.Generate(request(prompt, model, max_tokens), metadata=AUTH, timeout=60)
    return [t for r in stream for t in r.token_ids]


def adapters_of(server):
    info = server.stub.GetModelInfo(pb2.GetModelInfoRequest(), metadata=AUTH, timeout=30)
    return list(info.lora_adapters)


def check_equals_llama_cpp(server, base, name, path):
    for prompt in PROMPTS:
        got = run(server, prompt, name)
        want, gaps = llama_cpp_greedy(base, prompt, MAX_TOKENS, lora_path=path)
        if got != want:
            k = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            assert gaps[k] < EXACT_NEAR_TIE, f"{name!r}: token {k} {got[k]} vs {want[k]}"


def test_adapters_load_serve_unload_and_load_again(files):
    base, allowed, _ = files
    with runtime_server(allowed, base) as server:
        with pytest.raises(grpc.RpcError) as e:
            run(server, PROMPTS[0], "a")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert load(server, "a", "a.gguf") == (200, {"lora_name": "a", "lora_int_id": 1})
        assert load(server, "b", allowed / "b.gguf") == (200, {"lora_name": "b", "lora_int_id": 2})
        assert adapters_of(server) == ["a", "b"]
        for name in ("a", "b"):
            check_equals_llama_cpp(server, base, name, allowed / f"{name}.gguf")
        lone = {m: run(server, PROMPTS[0], m) for m in ("", "a", "b")}
        assert len({tuple(v) for v in lone.values()}) == 3
        results = {}
        threads = [threading.Thread(target=lambda m=m: results.__setitem__(
            m, run(server, PROMPTS[0], m))) for m in ("", "a", "b") * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == lone

        assert unload(server, "a") == (200, {"lora_name": "a", "lora_int_id": 1})
        with pytest.raises(grpc.RpcError) as e:
            run(server, PROMPTS[0], "a")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "'b'" in e.value.details()
        assert run(server, PROMPTS[0], "b") == lone["b"]
        assert adapters_of(server) == ["b"]
        # Loaded again: a new id, the same continuations (its cached prefixes are keyed by its
        # tensors, not its id).
        assert load(server, "a", "a.gguf") == (200, {"lora_name": "a", "lora_int_id": 3})
        assert run(server, PROMPTS[0], "a") == lone["a"]


def test_a_stream_running_with_an_unloaded_adapter_ends_as_its_lone_run(tmp_path):
    """On the default model (seconds for 160 tokens, so the unload lands mid-stream)."""
    if not DEFAULT_MODEL.exists():
        pytest.skip(f"{DEFAULT_MODEL} is missing: run scripts/setup")
    write_adapter(str(DEFAULT_MODEL), str(tmp_path / "s.gguf"), rank=16, alpha=32, seed=5)
    prompt = [1, 9690, 198, 57, 5248, 3946, 288]
    with runtime_server(tmp_path, DEFAULT_MODEL) as server:
        assert load(server, "s", "s.gguf")[0] == 200
        want = run(server, prompt, "s", max_tokens=160)
        stream = server.stub.Generate(request(prompt, "s", 160), metadata=AUTH, timeout=60)
        got = list(next(stream).token_ids)
        assert unload(server, "s")[0] == 200
        with pytest.raises(grpc.RpcError) as e:
            run(server, prompt, "s")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        got += [t for r in stream for t in r.token_ids]
        assert got == want
        assert len(run(server, prompt)) == MAX_TOKENS  # the base model serves on


def test_refusals_leave_the_server_serving(files):
    base, allowed, outside = files
    with runtime_server(allowed, base, "--max-loras", "1") as server:
        assert load(server, "a", "a.gguf", key=None)[0] == 401
        assert load(server, "a", "a.gguf", key="wrong")[0] == 401
        for path in ("../outside.gguf", outside, "link.gguf", "missing.gguf", "/etc/passwd",
                     allowed):
            status, answer = load(server, "x", path)
            assert status == 403, path
            assert "inside --lora-dir" in answer["error"]
        status, answer = load(server, "x", "not-an-adapter.gguf")
        assert status == 400 and "adapter" in answer["error"]
        assert load(server, "tiny-llama", "a.gguf")[0] == 409  # the model's own name
        for body in (b"{not json", b"[]", json.dumps({"lora_name": "a"}).encode(),
                     json.dumps({"lora_name": 7, "lora_path": "a.gguf"}).encode(),
                     json.dumps({"lora_name": "a b", "lora_path": "a.gguf"}).encode(),
                     json.dumps({"lora_name": "x" * 200, "lora_path": "a.gguf"}).encode()):
            assert admin(server, "/v1/load_lora_adapter", body)[0] == 400, body
        assert load(server, "a", "a.gguf")[0] == 200
        status, answer = load(server, "a", "b.gguf")
        assert status == 409 and "already" in answer["error"]
        status, answer = load(server, "b", "b.gguf")
        assert status == 409 and "--max-loras" in answer["error"]
        status, answer = unload(server, "nobody")
        assert status == 404
        assert adapters_of(server) == ["a"]
        assert len(run(server, PROMPTS[0], "a")) == MAX_TOKENS


def test_the_gateway_routes_an_adapter_after_its_next_health_check(files):
    base, allowed, _ = files
    with runtime_server(allowed, base) as server, \
            Gateway(backend_address(server), extra_args=["--backend-api-key", KEY]) as gateway:
        client = gateway.client()

        def listed():
            return {m.id for m in client.models.list().data}

        assert "a" not in listed()
        assert load(server, "a", "a.gguf")[0] == 200
        deadline = time.monotonic() + 30
        while "a" not in listed():
            assert time.monotonic() < deadline, "the gateway never listed the new adapter"
            time.sleep(0.1)
        prompt_text = "Once upon a time"
        got = client.completions.create(model="a", prompt=prompt_text, max_tokens=8,
                                        temperature=0, extra_body={"ignore_eos": True})
        assert got.model == "a" and got.usage.completion_tokens == 8
        assert unload(server, "a")[0] == 200
        deadline = time.monotonic() + 30
        while "a" in listed():
            assert time.monotonic() < deadline, "the gateway never forgot the adapter"
            time.sleep(0.1)


@pytest.mark.parametrize("extra,message", [
    (["--metrics-port", "0"], "--api-key"),
    (["--api-key", KEY, "--metrics-port", "-1"], "--api-key"),
    (["--api-key", KEY, "--metrics-port", "0", "--model", "second={base}"], "serves one model"),
    (["--api-key", KEY, "--metrics-port", "0", "--lora-dir", "{missing}"], "is not a directory"),
], ids=["no key", "no metrics port", "several models", "missing directory"])
def test_startup_refuses_what_cannot_work(files, tmp_path, extra, message):
    base, allowed, _ = files
    args = [a.format(base=base, missing=tmp_path / "nowhere") for a in extra]
    if "--lora-dir" not in args:
        args += ["--lora-dir", str(allowed)]
    out = subprocess.run([str(SERVER_BIN), "--model", str(base), "--port", "0", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert message in out.stderr + out.stdout
