"""Bad inputs of docs/bad-inputs.md that no other e2e test sends over HTTP: /tokenize and
/detokenize bodies, chat message fields, wrong JSON types; and none of them, nor any bad gRPC
request of test_server_errors.py, disturbs a request running beside them."""
import concurrent.futures
import json
import re
import socket

import grpc
import pytest

from gateway_harness import Gateway, backend_address, model_name
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
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x", "refusal": "no"}]},
     400, "messages", "messages[0].refusal is not supported"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages", "messages[0]"),
    # A "type" that is not a string dropped the connection (found by request_mapping_fuzzer).
    ("/v1/chat/completions", {"messages": user("x"), "response_format": {"type": []}}, 400,
     "response_format", "response_format must be {\"type\""),
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
    # A tool whose parameters nest 64 levels in all (the body's object the first), accepted by
    # the gateway; the server's template renders them.
    model = model_name(gateway)
    tool = ('[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
            '"properties": {"x": {"enum": %s}}}}}]' % nested(57))
    body = ('{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
            '"tools": %s}' % (model, tool))
    response = gateway.http.post("/v1/chat/completions", content=body,
                                 headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text


BODY_LIMIT = 8 << 20  # the gateway's default --max-body-size


def filled(prefix, item, suffix):
    """prefix + "item,item,...,item" + suffix, as many items as the body limit holds."""
    count = (BODY_LIMIT - len(prefix) - len(suffix) + 1) // (len(item) + 1)
    return prefix + ",".join([item] * count) + suffix


def distinct_keys(prefix, suffix):
    """prefix + '"0":0,"1":0,...' + suffix, as many keys as the body limit holds."""
    parts, size = [], len(prefix) + len(suffix)
    while size + len(part := f'"{len(parts)}":0') + 1 <= BODY_LIMIT:
        parts.append(part)
        size += len(part) + 1
    return prefix + ",".join(parts) + suffix


VALUES = "more than 1048576 JSON values and object keys: send fewer prompts"
ALLOCATED = "more than 131072 strings, lists and objects (object keys included): send fewer"
# 8 MiB bodies of tiny values: each took 75 to 180 MB of the gateway's memory as JSON, and
# lists of objects held a thread for minutes (nlohmann's callback parser scanned the list
# after each object: 200000 `{}` took 7.6 s, 2.8 million about 25 min).
WIDE = [
    # (path, body, words of the message)
    ("/v1/completions", filled('{"model": "m", "prompt": [', "0", '], "max_tokens": 1}'), VALUES),
    ("/v1/completions", filled('{"model": "m", "prompt": "Hi", "stop": [', "[]", "]}"),
     ALLOCATED),
    ("/v1/completions", filled('{"model": "m", "prompt": "Hi", "frobnicate": [', "{}", "]}"),
     ALLOCATED),
    ("/v1/completions", distinct_keys('{"model": "m", "prompt": "Hi", "logit_bias": {', "}}"),
     ALLOCATED),
    ("/v1/completions", filled('{"prompt": "Hi", "x": [', "[" + ",".join(["0"] * 64) + "]", "]}"),
     VALUES),
    ("/v1/chat/completions", filled('{"model": "m", "messages": [', '""', "]}"), ALLOCATED),
    ("/v1/chat/completions", filled('{"messages": [', '{"role": "user", "content": ""}', "]}"),
     ALLOCATED),
    ("/tokenize", filled('{"messages": [', '{"":0}', "]}"), ALLOCATED),
    ("/detokenize", filled('{"tokens": [', "0", "]}"), VALUES),
]
WIDE_IDS = [f"{path}-{i}" for i, (path, _, _) in enumerate(WIDE)]


def post_raw(gateway, path, body):
    return gateway.http.post(path, content=body, headers={"content-type": "application/json"})


@pytest.mark.parametrize("path,body,words", WIDE, ids=WIDE_IDS)
def test_body_of_too_many_values_is_refused(gateway, path, body, words):
    assert len(body) <= BODY_LIMIT
    response = post_raw(gateway, path, body)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] is None, error
    assert words in error["message"], error


# What two of the worst bodies at once may add to the gateway's peak RSS. Each is read whole
# (8 MiB) and, within the limits, becomes at most 1048576 numbers of 16 bytes in a list that
# doubles as it grows (8 MiB copied to 16 MiB at the last doubling) or 131072 strings, lists
# or objects of up to about 100 bytes (13 MB): about 32 MiB each. Measured 91 MiB for two at
# once (56 for one alone), malloc's per-thread arenas included. Before the limits one such
# body alone took 75 to 180 MiB (docs/bad-inputs.md).
MAX_GROWTH_MIB = 128


def test_bodies_of_tiny_values_cost_the_gateway_bounded_memory(server):
    # A gateway of its own: VmHWM is the peak over the process's life.
    with Gateway(backend_address(server), log_level="info") as gateway:
        before = gateway.status_mib("VmHWM")
        # Two at a time: the gateway's two I/O threads parse two bodies at once.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda case: post_raw(gateway, case[0], case[1]), WIDE))
        assert [a.status_code for a in answers] == [400] * len(WIDE)
        growth = gateway.status_mib("VmHWM") - before
        if gateway.sanitized():
            pytest.skip(f"the sanitizers' allocator keeps freed memory (grew {growth:.0f} MiB)")
        assert growth < MAX_GROWTH_MIB, f"peak RSS grew {growth:.0f} MiB"


def test_largest_legitimate_bodies_pass_the_limits(gateway):
    model = model_name(gateway)
    # logit_bias over every token id of the vocabulary (98304 values): all but one at -100,
    # so greedy decoding can only pick that one.
    chosen = gateway.http.post("/tokenize", json={"prompt": " hello"}).json()["tokens"][0]
    bias = {str(i): -100 for i in range(49152)}
    bias[str(chosen)] = 100
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 3, "temperature": 0,
            "ignore_eos": True, "logit_bias": bias}
    response = gateway.http.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text[:300]
    expected = gateway.http.post("/detokenize", json={"tokens": [chosen] * 3}).json()["prompt"]
    assert response.json()["choices"][0]["text"] == expected
    # 64 prompts of 8192 token ids (524288 values, 3.5 MB): mapped and passed on; the server
    # refuses them (no room for max_tokens in its 8192-token context), not the gateway.
    prompts = [[(p * 8192 + i) % 49152 for i in range(8192)] for p in range(64)]
    body = json.dumps({"model": model, "prompt": prompts, "max_tokens": 1})
    response = post_raw(gateway, "/v1/completions", body)
    assert response.status_code == 400, response.text[:300]
    assert "the prompt is 8192 tokens; this server's limit is 8192" in response.text


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


def test_prompt_just_under_the_gateways_message_check_reaches_the_server(gateway):
    # The gateway measured the message before adding its request_id (about 30 bytes): a prompt
    # just under its check went over the server's 4 MiB and came back as a 429 queue_full.
    model = model_name(gateway)
    text = "word " * (1 << 20)
    bodies = (("/v1/completions", lambda t: {"model": model, "prompt": t, "max_tokens": 1}),
              ("/v1/chat/completions", lambda t: {"model": model, "messages": user(t),
                                                  "max_tokens": 1}))
    for path, body in bodies:
        refused = gateway.http.post(path, json=body(text))
        assert refused.status_code == 413, refused.text[:300]
        size = int(re.search(r"the request is (\d+) bytes", refused.text).group(1))
        fits = text[:len(text) - (size - 4194304)]
        response = gateway.http.post(path, json=body(fits))
        # The server's own answer: a prompt far over its context.
        assert response.status_code == 400, response.text[:300]
        assert "this server's limit is 8192 tokens" in response.json()["error"]["message"]
