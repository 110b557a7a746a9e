"""The gateway's HTTP face against hostile clients, over raw sockets (issue 35): no body is read
before the key and none forever, bodies being read share one memory budget, request smuggling
framings are 400s, and a client that half-closes its side still gets its answer."""
import json
import socket
import time

import pytest

from gateway_harness import Gateway, backend_address, model_name

KEY = "hardening-key"


def connect(gateway, timeout=30):
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=timeout)


def read_until_closed(s):
    answer = b""
    while data := s.recv(65536):
        answer += data
    return answer


def final_response(answer):
    """The answer without the interim 1xx responses before it."""
    while answer.startswith(b"HTTP/1.1 1"):
        answer = answer[answer.index(b"\r\n\r\n") + 4:]
    return answer


def body_of(answer):
    """The (possibly chunked) body of a whole HTTP/1.1 answer."""
    head, _, rest = final_response(answer).partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return rest
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body, rest = body + rest[:size], rest[size + 2:]
    return body


def post_head(length, path="/v1/completions", extra=b""):
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra + b"Content-Length: " + str(length).encode() + b"\r\n\r\n")


# --- No body before the key, and none forever ---------------------------------------------

def test_a_request_without_the_key_is_refused_on_its_head(server):
    # Before: the gateway read (and reserved) the whole declared body before looking at the key.
    with Gateway(backend_address(server), extra_args=["--api-key", KEY]) as g:
        with connect(g, timeout=10) as s:
            s.sendall(post_head(8000000))
            answer = read_until_closed(s)  # no byte of the body sent
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert b"authentication_error" in answer and b"Connection: close" in answer
        # With the key, the same head is read on.
        with connect(g) as s:
            model = g.client(api_key=KEY).models.list().data[0].id
            body = json.dumps({"model": model, "prompt": "Hi", "max_tokens": 1,
                               "unknown_field": 1}).encode()
            s.sendall(post_head(len(body), extra=b"Authorization: Bearer " + KEY.encode() +
                                b"\r\nConnection: close\r\n") + body)
            assert read_until_closed(s).startswith(b"HTTP/1.1 400")


def test_a_body_that_does_not_arrive_in_time_is_a_408(server):
    with Gateway(backend_address(server), extra_args=["--body-timeout", "1"]) as g:
        with connect(g) as s:
            s.sendall(post_head(100) + b'{"prompt"')
            start = time.monotonic()
            answer = read_until_closed(s)
            waited = time.monotonic() - start
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"--body-timeout" in answer and b"Connection: close" in answer
        assert 0.8 < waited < 10, waited
        # A client that trickles its body byte by byte is cut off the same way.
        with connect(g) as s:
            s.sendall(post_head(100))
            start = time.monotonic()
            try:
                while time.monotonic() - start < 5:
                    s.sendall(b" ")
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer = read_until_closed(s)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert g.http.get("/health").status_code == 200


def test_stalled_uploads_cost_what_they_sent_not_what_they_declared(server):
    # 20 heads declaring 8000000 bytes each, a little of each body, then nothing: before, each
    # reserved its whole declared length (160 MB allocated, held until the client left; the
    # issue measured +140 MB of RSS once the allocator handed out memory it had touched).
    with Gateway(backend_address(server), log_level="info") as g:
        if g.sanitized():
            pytest.skip("the sanitizers' allocator maps memory its own way")
        assert g.http.get("/health").status_code == 200
        before = g.status_mib("VmData")
        stalled = [connect(g) for _ in range(20)]
        for s in stalled:
            s.sendall(post_head(8000000) + b'{"prompt": "' + b"a" * 1000)
        time.sleep(1)
        growth = g.status_mib("VmData") - before
        assert g.http.get("/health").status_code == 200
        for s in stalled:
            s.close()
    assert growth < 32, f"the gateway allocated {growth:.0f} MiB for 20 KB of bodies"


def test_bodies_being_read_share_one_budget(server):
    args = ["--max-body-size", "1MiB", "--body-buffer-size", "2MiB"]
    with Gateway(backend_address(server), extra_args=args) as g:
        model = model_name(g)
        # Many declared bodies that sent little leave room for others.
        small = [connect(g) for _ in range(10)]
        for s in small:
            s.sendall(post_head(1000000) + b"{" * 10)
        response = g.http.post("/v1/completions",
                               json={"model": model, "prompt": "Hi", "max_tokens": 1})
        assert response.status_code == 200, response.text
        # Bodies that did send most of their bytes fill it: the next one gets a 503 that says
        # which flag and to retry.
        big = [connect(g) for _ in range(3)]
        answers = []
        for s in big:
            s.sendall(post_head(1000000))
            try:
                s.sendall(b" " * 900000)
            except (BrokenPipeError, ConnectionResetError):
                pass
        for s in big:
            s.settimeout(3)
            try:
                answers.append(s.recv(4096))
            except socket.timeout:
                answers.append(b"")
        refused = [a for a in answers if a]
        assert len(refused) == 1 and refused[0].startswith(b"HTTP/1.1 503"), answers
        assert b"--body-buffer-size" in refused[0] and b"Retry-After: 1" in refused[0]
        for s in small + big:
            s.close()
        # Given back once they ended.
        time.sleep(0.5)
        response = g.http.post("/v1/completions", content=b" " * 900000 + b"{}",
                               headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text  # read whole; no prompt in it


def test_the_body_buffer_must_hold_the_largest_body(server):
    from gateway_harness import GATEWAY_BIN
    import subprocess
    out = subprocess.run([str(GATEWAY_BIN), "--backend", backend_address(server),
                          "--max-body-size", "8MiB", "--body-buffer-size", "1MiB"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "--body-buffer-size (1MiB) must be at least --max-body-size" in out.stdout + out.stderr


# --- Request smuggling ----------------------------------------------------------------------

POST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
CHUNKED_BODY = b"2\r\n{}\r\n0\r\n\r\n"
SMUGGLING = [
    # (id, request, words of the message); each was read as some request before.
    ("coding before chunked", POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + CHUNKED_BODY,
     b"must be 'chunked' alone"),
    ("identity", POST + b"Transfer-Encoding: identity\r\n\r\n" + CHUNKED_BODY,
     b"must be 'chunked' alone"),
    ("xchunked", POST + b"Transfer-Encoding: xchunked\r\n\r\n" + CHUNKED_BODY,
     b"must be 'chunked' alone"),
    ("chunked twice over two lines",
     POST + b"Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n" + CHUNKED_BODY,
     b"must be 'chunked' alone"),
    ("coding beside a length", POST + b"Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
     b"must be 'chunked' alone"),
    ("chunked in HTTP/1.0",
     b"POST /v1/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + CHUNKED_BODY,
     b"not allowed in an HTTP/1.0 request"),
    ("folded header", POST + b"X-Note: a\r\n  b\r\nContent-Length: 2\r\n\r\n{}",
     b"obsolete line folding"),
    ("folded Transfer-Encoding", POST + b"Transfer-Encoding:\r\n chunked\r\n\r\n" + CHUNKED_BODY,
     b"obsolete line folding"),
    ("folded first line", b"POST /v1/completions HTTP/1.1\r\n Host: x\r\nContent-Length: 2\r\n\r\n{}",
     b"obsolete line folding"),
    ("no Host", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
     b"needs a Host header"),
    ("two Hosts", POST + b"Host: y\r\nContent-Length: 2\r\n\r\n{}", b"one Host header"),
    # Refused by Boost.Beast already; kept here so that stays true.
    ("length then chunked", POST + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
     b"bad Transfer-Encoding"),
    ("chunked then length", POST + b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}",
     b"bad Content-Length"),
    ("chunked twice", POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
     + CHUNKED_BODY, b"bad Transfer-Encoding"),
    ("two lengths", POST + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
     b"bad Content-Length"),
    ("space before the colon", POST + b"Transfer-Encoding : chunked\r\n\r\n" + CHUNKED_BODY,
     b"malformed HTTP request"),
]


@pytest.mark.parametrize("request_,words", [case[1:] for case in SMUGGLING],
                         ids=[case[0] for case in SMUGGLING])
def test_smuggling_framings_are_400_and_close(gateway, request_, words):
    with connect(gateway) as s:
        s.sendall(request_)
        answer = read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b"Connection: close" in answer and words in answer, answer[:400]
    assert b"\r\nHTTP/" not in answer, answer  # nothing after it was read as a request


def test_honest_framings_still_pass(gateway):
    model = model_name(gateway).encode()
    body = b'{"model": "' + model + b'", "prompt": "Hi", "max_tokens": 1}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    honest = [
        POST + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked,
        POST + b"Transfer-Encoding: Chunked\r\nConnection: close\r\n\r\n" + chunked,
        POST + b"Content-Length: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (len(body), len(body), body),
        b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        b"GET /health HTTP/1.0\r\n\r\n",
    ]
    for request_ in honest:
        with connect(gateway) as s:
            s.sendall(request_)
            answer = read_until_closed(s)
        assert answer.split(b"\r\n")[0].endswith(b" 200 OK"), (request_, answer[:300])


# --- Half-closed clients ----------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_client_that_half_closes_still_gets_its_answer(gateway, stream):
    body = json.dumps({"model": model_name(gateway), "prompt": "Once upon a time",
                       "max_tokens": 8, "ignore_eos": True, "stream": stream}).encode()
    with connect(gateway) as s:
        s.sendall(post_head(len(body)) + body)
        s.shutdown(socket.SHUT_WR)  # nothing more from this side; still reading
        answer = read_until_closed(s)
    response = final_response(answer)
    assert response.startswith(b"HTTP/1.1 200"), answer[:300]
    if stream:
        events = [line for line in body_of(answer).split(b"\n") if line.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]", events
        assert len(events) >= 9
    else:
        assert json.loads(body_of(answer))["usage"]["completion_tokens"] == 8


# --- Small ones ---------------------------------------------------------------------------------

def test_a_tokenize_answer_over_the_grpc_receive_limit_is_a_413(gateway):
    # 3.2 MB of text (under the 4 MiB a request may be) tokenizes to 1.6 million ids, which
    # with the echoed prompt are over the 4 MiB the gateway receives: a 429 queue_full before,
    # retried by clients for ever.
    response = gateway.http.post("/tokenize", json={"prompt": "a " * 1600000})
    assert response.status_code == 413, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "request_too_large", error
    assert "4194304" in error["message"] and "shorter" in error["message"], error
    assert "retry-after" not in response.headers


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                              "top_logprobs": 0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                              "logprobs": False, "top_logprobs": 3}),
    # The dialects without the field refuse it by name.
    ("/v1/completions", {"prompt": "Hi", "top_logprobs": 3}),
    ("/v1/responses", {"input": "Hi", "top_logprobs": 3}),
    ("/v1/messages", {"max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}],
                      "top_logprobs": 3}),
], ids=["chat 0", "chat logprobs false", "completions", "responses", "messages"])
def test_top_logprobs_without_logprobs_is_a_400(gateway, path, body):
    response = gateway.http.post(path, json={"model": model_name(gateway), **body})
    assert response.status_code == 400, response.text[:300]
    assert "top_logprobs" in response.text, response.text[:300]


def test_health_is_not_ready_until_a_backend_answers():
    # Readiness: a backend that takes TCP connections but never answers gRPC's health check
    # keeps /health at 503 (the manifests' readiness probe); /metrics stays 200.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        with Gateway(f"127.0.0.1:{silent.getsockname()[1]}", wait_ready=False) as g:
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                response = g.http.get("/health")
                assert response.status_code == 503, response.text
                assert response.headers["retry-after"] == "1"
                time.sleep(0.2)
            assert g.http.get("/metrics").status_code == 200
