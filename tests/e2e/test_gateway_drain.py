"""SIGTERM to tokenmill-gateway drains it: new requests are refused (connection refused, or 503
on a connection already open) while running requests and streams finish, up to
--drain-timeout; the streams still running then end with their API's error event, and the
gateway exits 0. scripts/serve stops the gateway first, then the server."""
import signal
import time

import httpx2 as httpx
import pytest

from gateway_harness import Gateway, backend_address, model_name
from process_harness import RPC_TIMEOUT_S
from server_harness import Server
from test_gateway_abort import APIS, body, error_event, events


@pytest.fixture(scope="module")
def server():
    with Server() as s:
        yield s


def test_a_stream_survives_sigterm_and_ends_with_its_finish_reason(server):
    with Gateway(backend_address(server), extra_args=("--drain-timeout", "120")) as gateway:
        stream = gateway.client().chat.completions.create(
            model=model_name(gateway), messages=[{"role": "user", "content": "Count:"}],
            max_tokens=200, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True})
        chunks = iter(stream)
        first = next(chunks)
        gateway.send_signal(signal.SIGTERM)
        gateway.wait_for_log(r"draining 1 requests")
        rest = list(chunks)
        finished = [c.choices[0].finish_reason for c in [first, *rest] if c.choices]
        assert finished[-1] == "length"
        assert rest[-1].usage.completion_tokens == 200
        assert gateway.proc.wait(timeout=30) == 0


def refused(url):
    """A new request during the drain: refused, as a connection or with a 503."""
    try:
        response = httpx.get(url + "/v1/models", timeout=RPC_TIMEOUT_S)
    except httpx.ConnectError:
        return True
    return response.status_code == 503 and response.json()["error"]["code"] == "shutting_down"


def test_new_requests_during_the_drain_are_refused(server):
    with Gateway(backend_address(server), extra_args=("--drain-timeout", "120")) as gateway:
        model = model_name(gateway)
        kept_alive = httpx.Client(base_url=gateway.url, timeout=RPC_TIMEOUT_S)
        assert kept_alive.get("/health").status_code == 200  # its connection stays open
        request = body("/v1/completions", model, True)
        with gateway.http.stream("POST", "/v1/completions", json=request) as running:
            got = events(running.iter_lines())
            next(got)
            gateway.send_signal(signal.SIGTERM)
            gateway.wait_for_log(r"draining 1 requests")  # logged once they are refused
            refusal = kept_alive.get("/v1/models")
            assert refusal.status_code == 503, refusal.text
            assert refusal.json()["error"]["code"] == "shutting_down"
            assert "shutting down" in refusal.json()["error"]["message"]
            assert refused(gateway.url)
            assert gateway.proc.poll() is None  # the stream still runs
            next(got)
        kept_alive.close()
        assert gateway.proc.wait(timeout=30) == 0


@pytest.mark.parametrize("api", APIS)
def test_a_stream_past_the_drain_timeout_ends_with_the_dialects_error(server, api):
    with Gateway(backend_address(server), extra_args=("--drain-timeout", "0.5")) as gateway:
        request = body(api, model_name(gateway), True)
        with gateway.http.stream("POST", api, json=request) as response:
            assert response.status_code == 200
            got = events(response.iter_lines())
            next(got)
            signalled = time.monotonic()
            gateway.send_signal(signal.SIGTERM)
            rest = list(got)
        assert time.monotonic() - signalled < 20
        error = error_event(api, rest)
        assert "--drain-timeout" in error["message"]
        if api == "/v1/messages":
            assert error["type"] == "overloaded_error"
        else:
            assert error["code"] == "aborted"
        assert gateway.proc.wait(timeout=30) == 0
    # The server aborted the cancelled request and serves on.
    server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 0)
