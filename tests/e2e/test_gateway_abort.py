"""A server-side abort (the server drained past --drain-timeout and ended its requests with
FINISH_REASON_ABORT) reaches every API the same way (docs/api.md, "Errors"): a 503 `aborted`
that says to retry, as the dialect writes an error. Before the response began it is the HTTP
error (Anthropic's 529 overloaded_error); after, the stream's error event ends the stream.
A backend killed mid-stream (SIGKILL: no drain, the connection just drops) ends each dialect's
stream with its error event too, and the gateway lives on (issue 35: a failed /v1/messages
stream once killed it)."""
import json
import signal
import threading

import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import Server

# A JSON Schema whose string must be long: the model cannot end its turn before the abort.
LONG = {"type": "object", "properties": {"text": {"type": "string", "minLength": 600}},
        "required": ["text"]}


APIS = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"]


def body(api, model, stream):
    if api == "/v1/completions":
        return {"model": model, "max_tokens": 4000, "ignore_eos": True, "stream": stream,
                "prompt": "Count:"}
    if api == "/v1/chat/completions":
        return {"model": model, "max_tokens": 4000, "ignore_eos": True, "stream": stream,
                "messages": [{"role": "user", "content": "Count:"}]}
    if api == "/v1/responses":
        return {"model": model, "input": "Count:", "max_output_tokens": 4000, "stream": stream,
                "text": {"format": {"type": "json_schema", "name": "long", "schema": LONG}}}
    return {"model": model, "max_tokens": 4000, "stream": stream,
            "messages": [{"role": "user", "content": "Count:"}],
            "output_config": {"format": {"type": "json_schema", "schema": LONG}}}


def events(lines):
    """The JSON data of each SSE event (the chat stream's [DONE] as the string)."""
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: "):]
            yield data if data == "[DONE]" else json.loads(data)


@pytest.fixture
def aborting():
    """A gateway over a server that aborts what is left 0.2 s after SIGTERM."""
    server = Server("--drain-timeout", "0.2")
    gateway = Gateway(backend_address(server))
    try:
        yield server, gateway
    finally:
        gateway.close()
        server.close()


def error_event(api, rest):
    """The dialect's error event that ends the stream `rest` (the events after the first)."""
    if api in ("/v1/chat/completions", "/v1/completions"):
        assert rest[-1] == "[DONE]", rest[-3:]
        return rest[-2]["error"]
    if api == "/v1/responses":
        assert rest[-1]["type"] == "response.failed", rest[-3:]
        return rest[-1]["response"]["error"]
    assert rest[-1]["type"] == "error", rest[-3:]
    return rest[-1]["error"]


@pytest.mark.parametrize("api", APIS)
def test_an_abort_after_the_stream_began_is_the_dialects_error_event(aborting, api):
    server, gateway = aborting
    with gateway.http.stream("POST", api, json=body(api, model_name(gateway), True)) as response:
        assert response.status_code == 200
        got = events(response.iter_lines())
        next(got)
        server.signal(signal.SIGTERM)
        rest = list(got)
    assert server.wait_exit() == 0
    if api in ("/v1/chat/completions", "/v1/completions"):
        assert rest[-1] == "[DONE]"
        assert rest[-2]["error"]["code"] == "aborted", rest[-3:]
    elif api == "/v1/responses":
        assert rest[-1]["type"] == "response.failed", rest[-3:]
        assert rest[-1]["response"]["error"]["code"] == "aborted"
    else:
        assert rest[-1] == {"type": "error", "error": {"type": "overloaded_error",
                                                       "message": rest[-1]["error"]["message"]}}
        assert "retry" in rest[-1]["error"]["message"]
    # The gateway lived through it.
    assert gateway.proc.poll() is None


@pytest.mark.parametrize("api,status", [("/v1/chat/completions", 503), ("/v1/responses", 503),
                                        ("/v1/messages", 529)])
def test_an_abort_before_the_response_is_a_retryable_error(aborting, api, status):
    server, gateway = aborting
    model = model_name(gateway)
    # Not streamed: nothing is written before the end, so the abort is the HTTP status.
    result = {}

    def post():
        result["response"] = gateway.http.post(api, json=body(api, model, False))

    thread = threading.Thread(target=post)
    thread.start()
    server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 1)
    server.signal(signal.SIGTERM)
    thread.join(timeout=60)
    assert server.wait_exit() == 0
    response = result["response"]
    assert response.status_code == status, response.text
    if api == "/v1/messages":
        assert response.json()["error"]["type"] == "overloaded_error"
    else:
        assert response.json()["error"]["code"] == "aborted"


@pytest.fixture
def killable():
    """A gateway over a server this test kills."""
    server = Server()
    gateway = Gateway(backend_address(server))
    try:
        yield server, gateway
    finally:
        gateway.close()
        server.close()


@pytest.mark.parametrize("api", APIS)
def test_a_backend_killed_mid_stream_is_the_dialects_error_event(killable, api):
    server, gateway = killable
    with gateway.http.stream("POST", api, json=body(api, model_name(gateway), True)) as response:
        assert response.status_code == 200
        got = events(response.iter_lines())
        next(got)
        server.signal(signal.SIGKILL)
        rest = list(got)
    server.proc.wait(timeout=30)
    error = error_event(api, rest)
    assert error["message"], rest[-3:]
    if api == "/v1/messages":
        assert error["type"] in ("api_error", "overloaded_error"), error
    # The gateway lived through it and still answers.
    assert gateway.proc.poll() is None
    assert gateway.http.get("/health").status_code in (200, 503)
