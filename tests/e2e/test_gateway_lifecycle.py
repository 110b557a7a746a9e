"""tokenmill-gateway's life: settings from TOKENMILL_GATEWAY_* variables, SIGTERM with streams
open and --drain-timeout 0 (exits 0 at once and the server aborts their requests; draining:
test_gateway_drain.py), a backend that starts after the gateway, idle keep-alive
connections."""
import signal
import socket
import threading
import time

import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import Server


@pytest.fixture(scope="module")
def server():
    with Server() as s:
        yield s


def test_settings_from_environment_variables(server):
    with Gateway(env={"TOKENMILL_GATEWAY_BACKEND": f"127.0.0.1:9,{backend_address(server)}",
                      "TOKENMILL_GATEWAY_SERVED_MODEL_NAME": "my-model"}) as g:
        assert [m.id for m in g.client().models.list().data] == ["my-model"]
        out = g.client().completions.create(model="my-model", prompt="Hi", max_tokens=1)
        assert out.model == "my-model"
        m = g.metrics()
        assert m["tokenmill_gateway:backend_healthy{backend=127.0.0.1:9}"] == 0
        assert m[f"tokenmill_gateway:backend_healthy{{backend={backend_address(server)}}}"] == 1


def test_sigterm_with_open_streams_exits_and_frees_them(server):
    g = Gateway(backend_address(server), extra_args=("--drain-timeout", "0"))
    try:
        model = model_name(g)
        started = threading.Barrier(5)

        def stream():
            body = {"model": model, "prompt": "Count:", "max_tokens": 4000, "ignore_eos": True,
                    "stream": True}
            try:
                with g.http.stream("POST", "/v1/completions", json=body) as response:
                    lines = response.iter_lines()
                    next(lines)
                    started.wait(timeout=60)
                    for _ in lines:
                        pass
            except Exception:  # the gateway going away ends the stream, as it should
                pass

        threads = [threading.Thread(target=stream) for _ in range(4)]
        for t in threads:
            t.start()
        started.wait(timeout=60)
        server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 4)
        g.send_signal(signal.SIGTERM)
        assert g.proc.wait(timeout=20) == 0
        server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 0)
        for t in threads:
            t.join(timeout=30)
    finally:
        g.close()


def test_backend_started_after_the_gateway():
    # Reserve a port, start the gateway on it, then the server there.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Gateway(f"127.0.0.1:{port}", wait_ready=False) as g:
        assert g.http.get("/health").status_code == 503
        with Server(port=port):
            g.wait_ready()
            out = g.client().completions.create(model=model_name(g), prompt="Hi", max_tokens=1)
            assert out.usage.completion_tokens == 1
        # The server stopped: the gateway notices.
        deadline = time.monotonic() + 30
        while g.http.get("/health").status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_garbage_and_idle_connections_do_not_hurt(server):
    with Gateway(backend_address(server)) as g:
        idle = [socket.create_connection(("127.0.0.1", g.port)) for _ in range(20)]
        with socket.create_connection(("127.0.0.1", g.port)) as bad:
            bad.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert bad.recv(4096).startswith(b"HTTP/1.1 400")
        out = g.client().completions.create(model=model_name(g), prompt="Hi", max_tokens=1)
        assert out.usage.completion_tokens == 1
        for s in idle:
            s.close()
