"""tokenmill-server's life: health while loading, serving and draining; SIGTERM/SIGINT
draining that loses no stream; flags and their environment variables; reflection; JSON logs."""
import json
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase)
from google.protobuf.descriptor_pool import DescriptorPool

from server_harness import (DEFAULT_MODEL, EXIT_TIMEOUT_S, RPC_TIMEOUT_S, SERVER_BIN, Server,
                            generate, pb2)

SERVICE = "tokenmill.v1.Inference"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(server, service=""):
    stub = health_pb2_grpc.HealthStub(server.channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def wait_for_health(server, wanted, timeout=30):
    """Polls Check until it answers `wanted` (the server may not accept connections yet)."""
    channel_ready = grpc.channel_ready_future(server.channel)
    channel_ready.result(timeout=timeout)
    statuses = []
    for _ in range(int(timeout / 0.05)):
        statuses.append(health(server))
        if statuses[-1] == wanted:
            return statuses
        threading.Event().wait(0.05)
    raise AssertionError(f"health never became {wanted}: {statuses[-5:]}")


def test_not_serving_while_the_model_loads(tmp_path):
    # Opening a FIFO blocks until a writer comes: the server is up, its model still "loading".
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    server = Server(model=fifo, wait_ready=False)
    try:
        wait_for_health(server, NOT_SERVING)
        assert health(server, SERVICE) == NOT_SERVING
        for call in (lambda: generate(server.stub, pb2.GenerateRequest(text="Hi")),
                     lambda: server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=10)):
            with pytest.raises(grpc.RpcError) as error:
                call()
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "still loading" in error.value.details()
        # Let the load go on: a FIFO is no model file, so the server fails and says why.
        os.close(os.open(fifo, os.O_WRONLY))
        assert server.wait_exit() == 1
        server.wait_for_log(r"is not a regular file")
    finally:
        server.close()


def long_stream(server, prompt, max_tokens, request_id):
    return server.stub.Generate(pb2.GenerateRequest(text=prompt, max_tokens=max_tokens,
                                                    ignore_eos=True, request_id=request_id),
                                timeout=RPC_TIMEOUT_S)


# Draining waits for every stream however slow this machine (or a sanitizer build) is; the
# drain timeout itself is test_drain_timeout_aborts_what_is_left's.
NO_DRAIN_TIMEOUT = ("--drain-timeout", RPC_TIMEOUT_S)


def test_serving_then_draining_on_sigterm():
    server = Server(*NO_DRAIN_TIMEOUT)
    try:
        wait_for_health(server, SERVING)
        assert health(server, SERVICE) == SERVING
        expected, _, _ = generate(server.stub, pb2.GenerateRequest(
            text="The sea", max_tokens=200, ignore_eos=True))
        call = long_stream(server, "The sea", 200, "in-flight")
        first = next(call)
        server.signal(signal.SIGTERM)
        server.wait_for_log(r"SIGTERM: draining")
        # Still answering while it drains, but no longer serving and refusing new work.
        assert health(server) == NOT_SERVING
        assert health(server, SERVICE) == NOT_SERVING
        with pytest.raises(grpc.RpcError) as error:
            generate(server.stub, pb2.GenerateRequest(text="Hi", max_tokens=2))
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in error.value.details()
        rest = list(call)
        ids = list(first.token_ids) + [t for r in rest for t in r.token_ids]
        assert ids == expected
        assert rest[-1].finish_reason == pb2.FINISH_REASON_LENGTH
        assert server.wait_exit() == 0
        server.wait_for_log(r"stopped")
    finally:
        server.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_signal_during_8_streams_loses_none(sig):
    prompts = ["The sea", "In the morning", "My friend said", "Numbers: 1, 2,"]
    max_tokens = 40
    server = Server(*NO_DRAIN_TIMEOUT)
    try:
        expected = {p: generate(server.stub, pb2.GenerateRequest(
            text=p, max_tokens=max_tokens, ignore_eos=True))[0] for p in prompts}
        calls = [long_stream(server, prompts[i % 4], max_tokens, f"s{i}") for i in range(8)]
        firsts = [next(c) for c in calls]  # all eight are streaming
        server.signal(sig)
        with ThreadPoolExecutor(max_workers=8) as pool:
            rests = list(pool.map(list, calls))
        for i, (first, rest) in enumerate(zip(firsts, rests)):
            ids = list(first.token_ids) + [t for r in rest for t in r.token_ids]
            assert ids == expected[prompts[i % 4]], f"stream {i}"
            assert rest[-1].finish_reason == pb2.FINISH_REASON_LENGTH
        assert server.wait_exit() == 0
    finally:
        server.close()


def test_drain_timeout_aborts_what_is_left():
    server = Server("--drain-timeout", "0.2")
    try:
        call = long_stream(server, "The sea", 4000, "too-long")
        next(call)
        server.signal(signal.SIGTERM)
        rest = list(call)
        assert rest[-1].finish_reason == pb2.FINISH_REASON_ABORT
        assert rest[-1].usage.completion_tokens < 4000
        assert server.wait_exit() == 0
    finally:
        server.close()


def run_server(*args, env=None):
    return subprocess.run([str(SERVER_BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=EXIT_TIMEOUT_S, env={**os.environ, **(env or {})},
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args,env,message", [
    ([], {}, "give a model: --model PATH"),
    (["--model", DEFAULT_MODEL, "--port", "70000"], {}, "--port"),
    (["--model", DEFAULT_MODEL, "--device", "tpu"], {}, "--device"),
    pytest.param(["--model", DEFAULT_MODEL, "--device", "cuda"], {}, "use --device cpu",
                 marks=pytest.mark.skipif(os.path.exists("/dev/nvidia0"),
                                          reason="a GPU is here: --device cuda works")),
    (["--model", DEFAULT_MODEL, "--kv-cache-memory", "lots"], {}, "--kv-cache-memory"),
    (["--model", DEFAULT_MODEL], {"TOKENMILL_MAX_QUEUE": "many"}, "--max-queue"),
    (["--model", "/nonexistent/model.gguf", "--port", "0", "--metrics-port", "-1"], {},
     "cannot open model file '/nonexistent/model.gguf'"),
])
def test_bad_flags_fail_fast_with_a_message(args, env, message):
    result = run_server(*args, env=env)
    assert result.returncode != 0
    assert message in result.stderr


def test_environment_variables_set_flags():
    env = {"TOKENMILL_MAX_MODEL_LEN": "512", "TOKENMILL_BLOCK_SIZE": "32",
           "TOKENMILL_KV_CACHE_MEMORY": "64MiB"}
    with Server(env=env, metrics=False) as server:
        info = server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
        assert info.max_model_len == 512
        assert info.kv_block_size == 32
        # 64 MiB of 32-token blocks of SmolLM2's K/V (2 x 30 layers x 3 heads x 64 x 2 bytes).
        assert info.num_kv_blocks == (64 << 20) // (32 * 2 * 30 * 3 * 64 * 2)


def test_reflection_describes_the_api():
    with Server(metrics=False) as server:
        database = ProtoReflectionDescriptorDatabase(server.channel)
        services = database.get_services()
        assert SERVICE in services
        assert "grpc.health.v1.Health" in services
        pool = DescriptorPool(database)
        methods = {m.name for m in pool.FindServiceByName(SERVICE).methods}
        assert methods == {"Generate", "Embed", "Rerank", "Tokenize", "Detokenize",
                           "GetModelInfo"}
        request = pool.FindMessageTypeByName("tokenmill.v1.GenerateRequest")
        assert {"text", "token_ids", "chat", "sampling", "max_tokens", "stop"} <= set(
            request.fields_by_name)


def test_json_logs():
    with Server("--log-json", metrics=False) as server:
        generate(server.stub, pb2.GenerateRequest(text="Hi", max_tokens=2))
        server.wait_for_log(r"finished")
    records = [json.loads(line) for line in server.lines if line.strip()]
    assert records and all({"time", "level", "message"} <= set(r) for r in records)
    assert any(r["message"].startswith("listening on ") for r in records)
