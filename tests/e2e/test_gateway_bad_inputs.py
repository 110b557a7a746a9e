"""Bad inputs of docs/bad-inputs.md that no other e2e test sends over HTTP: /tokenize and
/detokenize bodies, chat message fields, wrong JSON types; and none of them, nor any bad gRPC
request of test_server_errors.py, disturbs a request running beside them."""
import concurrent.futures
import socket

import grpc
import pytest

from gateway_harness import model_name
from server_harness import generate, pb2


def user(content):
    return [{"role": "user", "content": content}]


BAD = [
    # (path, body, status, param, words of the message)
    ("/tokenize", [1], 400, None, "the request body must be a JSON object"),
    ("/tokenize", {}, 400, "prompt", "give either prompt or messages"),
    ("/tokenize", {"prompt": "a", "messages": user("b")}, 400, "messages",
     "give either prompt or messages"),
    ("/tokenize", {"prompt": 5}, 400, "prompt", "prompt must be a string"),
    ("/tokenize", {"prompt": "a", "lang": "fr"}, 400, "lang", "Unrecognized request argument"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, 400, "add_special_tokens",
     "add_special_tokens must be"),
    ("/detokenize", {}, 400, "tokens", "tokens must be a list of token ids"),
    ("/detokenize", {"tokens": [1, -2]}, 400, "tokens", "non-negative token ids"),
    ("/detokenize", {"tokens": [1, 2**40]}, 400, "tokens", "non-negative token ids"),
    # The server's message names its token_ids; the HTTP parameter is tokens.
    ("/detokenize", {"tokens": [5, 60000]}, 400, "tokens", "outside the vocabulary"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "messages",
     "messages must be a non-empty list"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x", "name": "bob"}]},
     400, "messages", "messages[0].name is not supported"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages", "messages[0]"),
    # A "type" that is not a string dropped the connection (found by request_mapping_fuzzer).
    ("/v1/chat/completions", {"messages": user("x"), "response_format": {"type": []}}, 400,
     "response_format", "only {\"type\": \"text\"}"),
    ("/v1/chat/completions", {"messages": user([{"type": 5, "text": "x"}])}, 400, "messages",
     "only parts"),
    ("/tokenize", {"messages": user([{"type": None, "text": "x"}])}, 400, "messages",
     "only parts"),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 1.5}, 400, "max_tokens",
     "max_tokens must be an integer"),
    ("/v1/completions", {"prompt": "Hi", "stream": "yes"}, 400, "stream", "stream must be"),
    ("/v1/completions", {"prompt": ["Hi"] * 65}, 400, "prompt", "at most 64 prompts"),
    ("/v1/completions", {"prompt": []}, 400, "prompt", "prompt is empty"),
]


@pytest.mark.parametrize("path,body,status,param,words", BAD,
                         ids=[f"{p}-{i}" for i, (p, *_rest) in enumerate(BAD)])
def test_bad_body_gets_its_status_and_message(gateway, path, body, status, param, words):
    response = gateway.http.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    assert words in error["message"], error


def test_bad_inputs_do_not_disturb_a_running_request(gateway):
    model = model_name(gateway)
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": True,
            "temperature": 0}
    alone = gateway.http.post("/v1/completions", json=body).json()["choices"][0]["text"]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        running = pool.submit(gateway.http.post, "/v1/completions", json=body)
        for path, bad, status, _, _ in BAD * 2:
            assert gateway.http.post(path, json=bad).status_code == status
        beside = running.result().json()["choices"][0]["text"]
    assert beside == alone


def test_bad_grpc_requests_do_not_disturb_a_running_request(server):
    from test_server_errors import BAD_GENERATE
    request = pb2.GenerateRequest(text="Once upon a time", max_tokens=48, ignore_eos=True)
    alone, _, _ = generate(server.stub, request)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = pool.submit(generate, server.stub, request)
        for name, bad, code, _ in BAD_GENERATE:
            with pytest.raises(grpc.RpcError) as error:
                generate(server.stub, bad)
            assert error.value.code() == code, name
        beside, _, _ = running.result()
    assert beside == alone


def nested(depth):
    return "[" * depth + "]" * depth


DEEP = [
    # (path, raw body with {deep} for a value nested past the limit)
    ("/v1/chat/completions",
     '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": {deep}}'),
    ("/v1/completions", '{"model": "m", "prompt": {deep}}'),
    ("/v1/completions", '{"model": "m", "prompt": "Hi", "frobnicate": {deep}}'),
    ("/tokenize", '{deep}'),
]


@pytest.mark.parametrize("path,template", DEEP, ids=[f"{p}-{i}" for i, (p, _) in enumerate(DEEP)])
def test_deeply_nested_body_is_refused(gateway, path, template):
    # 100000 levels are 200 KB, far under the body limit; dumping the tools recursed once per
    # level and overflowed the gateway's stack (SIGSEGV) before bodies were limited to 64.
    for depth in (65, 100_000):
        body = template.replace("{deep}", nested(depth))
        response = gateway.http.post(path, content=body,
                                     headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text
        assert "nests deeper than 64 levels" in response.json()["error"]["message"]
    assert gateway.http.get("/health").status_code == 200


def test_tools_nested_within_the_limit_reach_the_template(gateway):
    # 63 levels of tools inside the body's object: 64 in all, accepted by the gateway; the
    # server's template renders them.
    model = model_name(gateway)
    body = ('{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
            '"tools": %s}' % (model, nested(63)))
    response = gateway.http.post("/v1/chat/completions", content=body,
                                 headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text


def exchange(port, head, chunks=()):
    """Sends raw bytes, then reads the answer until the gateway closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        for chunk in chunks:
            s.sendall(chunk)
        answer = b""
        while data := s.recv(65536):
            answer += data
        return answer


POST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
BAD_HTTP = [
    # (request head and body, status line, words of the JSON message)
    (POST + b"X-Big: " + b"a" * 70000 + b"\r\nContent-Length: 2\r\n\r\n{}", b"400",
     b"header limit exceeded"),
    (POST + b"Content-Length: abc\r\n\r\n{}", b"400", b"bad Content-Length"),
    (POST + b"Content-Length: 2\r\nContent-Length: 7\r\n\r\n{}", b"400", b"bad Content-Length"),
    (POST + b"Content-Length: 99999999999999999999999\r\n\r\n{}", b"400", b"bad Content-Length"),
]


@pytest.mark.parametrize("request_,status,words", BAD_HTTP,
                         ids=["big header", "length not a number", "two lengths", "huge length"])
def test_malformed_http_gets_a_json_400_and_a_closed_connection(gateway, request_, status, words):
    answer = exchange(gateway.port, request_)  # returns once the gateway closed
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert b"Connection: close" in answer and words in answer, answer[:300]


def test_chunked_body_over_the_limit_is_a_413(gateway):
    # No Content-Length to refuse up front: the limit (8 MiB by default) holds while reading.
    chunk = b"%x\r\n" % 65536 + b"a" * 65536 + b"\r\n"
    answer = exchange(gateway.port, POST + b"Transfer-Encoding: chunked\r\n\r\n",
                      [chunk] * 129 + [b"0\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"request_too_large" in answer


def test_prompt_over_the_servers_message_limit_is_a_413(gateway):
    # 5 MiB of text: under the gateway's 8 MiB body limit, over the 4 MiB gRPC message
    # tokenmill-server receives. Its RESOURCE_EXHAUSTED used to come back as a 429 queue_full
    # with Retry-After, which clients retry in vain.
    model = model_name(gateway)
    text = "word " * (1 << 20)
    for path, body in (("/v1/completions", {"model": model, "prompt": text, "max_tokens": 1}),
                       ("/v1/chat/completions", {"model": model, "messages": user(text),
                                                 "max_tokens": 1}),
                       ("/tokenize", {"model": model, "prompt": text})):
        response = gateway.http.post(path, json=body)
        assert response.status_code == 413, response.text[:300]
        error = response.json()["error"]
        assert error["code"] == "request_too_large", error
        assert "tokenmill-server takes at most 4194304" in error["message"], error
