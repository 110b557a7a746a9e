"""A streaming client that stops reading holds back the backend's stream instead of growing the
gateway's memory: the gateway buffers at most kMaxBufferedResponses (32) responses per request,
pauses its gRPC reads (tokenmill_gateway:upstream_read_pauses_total), and once the client reads
again resumes them, losing nothing (the texts equal the same request answered whole).

stories260K with kv_window generates long streams fast (16 sequences x 1500 tokens, about
5 MB of events, past what the kernel's socket buffers absorb)."""
import json
import socket
import time

import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import TINY_MODEL, Server

MAX_BUFFERED = 32  # kMaxBufferedResponses in gateway/backends/upstream_call.h


@pytest.fixture(scope="module")
def server():
    with Server(model=TINY_MODEL, log_level="info") as s:
        yield s


@pytest.fixture(scope="module")
def gateway(server):
    with Gateway(backend_address(server), log_level="info") as g:
        yield g


def body(model, stream):
    return {"model": model, "prompt": "Once upon a time", "max_tokens": 1500, "n": 16,
            "ignore_eos": True, "temperature": 0, "stream": stream,
            "kv_window": {"sink_tokens": 4}}


def read_http_stream(sock):
    """The whole chunked SSE response: {choice index: text}, and whether [DONE] came."""
    data = b""
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    payload = b""
    while rest:  # de-chunk
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        payload += rest[:size]
        rest = rest[size + 2:]
    texts, done = {}, False
    for event in payload.decode().split("\n\n"):
        if not event.startswith("data: "):
            continue
        if event == "data: [DONE]":
            done = True
            continue
        for choice in json.loads(event[6:])["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    return texts, done


def test_a_client_that_does_not_read_pauses_the_backend_stream(gateway):
    model = model_name(gateway)
    whole = gateway.http.post("/v1/completions", json=body(model, False), timeout=300).json()
    expected = {c["index"]: c["text"] for c in whole["choices"]}
    assert len(expected) == 16

    pauses_before = gateway.metrics()["tokenmill_gateway:upstream_read_pauses_total"]
    payload = json.dumps(body(model, True)).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader's small window
    sock.settimeout(300)
    sock.connect(("127.0.0.1", gateway.port))
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
                     b"Content-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        # Not reading: the gateway's socket buffers fill, then its queue; then it pauses the
        # backend read and stays paused (the queue holds between half and all of its bound).
        deadline = time.monotonic() + 120
        stalled = 0
        while stalled < 10:
            m = gateway.metrics()
            buffered = m["tokenmill_gateway:buffered_responses"]
            assert buffered <= MAX_BUFFERED
            paused = m["tokenmill_gateway:upstream_read_pauses_total"] > pauses_before
            stalled = stalled + 1 if paused and buffered >= MAX_BUFFERED // 2 else 0
            assert time.monotonic() < deadline, f"the stream never stalled: {m}"
            time.sleep(0.1)
        assert m["tokenmill_gateway:max_request_buffered_responses"] <= MAX_BUFFERED
        texts, done = read_http_stream(sock)
    finally:
        sock.close()
    assert done
    assert texts == expected
    m = gateway.metrics()
    assert m["tokenmill_gateway:buffered_responses"] == 0
    assert m["tokenmill_gateway:max_request_buffered_responses"] <= MAX_BUFFERED


def test_a_client_that_leaves_while_paused_frees_the_backend(server, gateway):
    model = model_name(gateway)
    pauses_before = gateway.metrics()["tokenmill_gateway:upstream_read_pauses_total"]
    payload = json.dumps(body(model, True)).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    deadline = time.monotonic() + 120
    stalled = 0
    while stalled < 10:
        m = gateway.metrics()
        paused = m["tokenmill_gateway:upstream_read_pauses_total"] > pauses_before
        stalled = stalled + 1 if paused and \
            m["tokenmill_gateway:buffered_responses"] >= MAX_BUFFERED // 2 else 0
        assert time.monotonic() < deadline, f"the stream never stalled: {m}"
        time.sleep(0.1)
    sock.close()
    # The paused call is cancelled and ends: no backend call, no buffered response, no
    # request left on the server.
    deadline = time.monotonic() + 60
    while True:
        m = gateway.metrics()
        calls = sum(v for k, v in m.items() if k.startswith("tokenmill_gateway:backend_in_flight"))
        if calls == 0 and m["tokenmill_gateway:buffered_responses"] == 0:
            break
        assert time.monotonic() < deadline, f"the paused call never ended: {m}"
        time.sleep(0.1)
    server.wait_for_metrics(lambda s: s["tokenmill:num_requests_running"] == 0 and
                            s["tokenmill:kv_cache_blocks_in_use"] == 0)
