"""tokenmill-server's side ports as a hostile client on the same network meets them (issue 35):
/kv_events/state (every cached prompt's token ids) needs the server's --api-key while /metrics
stays open and carries no prompt data; the ZeroMQ event and replay sockets bind loopback unless
the operator names an interface; the metrics port bounds what a client may hold (connections,
time, request size), so idle connections cannot use up the descriptors gRPC needs to accept."""
import re
import socket
import time

import grpc
import httpx2 as httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from process_harness import RPC_TIMEOUT_S
from server_harness import Server, generate, pb2, pb2_grpc

KEY = "side-ports-key-7f3a"
PROMPT = "The secret launch code of tenant A is 4 8 15 16 23 42, and nobody else may read it."
# The labels /metrics may carry: none of them holds anything a client sent.
METRIC_LABELS = {"model_name", "engine", "finished_reason", "le", "block_size", "num_gpu_blocks"}


def metrics_url(server, path):
    return f"http://127.0.0.1:{server.metrics_port}{path}"


def authed(key=KEY):
    return (("authorization", f"Bearer {key}"),)


@pytest.fixture(scope="module")
def keyed():
    with Server("--api-key", KEY, "--kv-events-endpoint", "tcp://127.0.0.1:*") as server:
        list(server.stub.Generate(pb2.GenerateRequest(text=PROMPT, max_tokens=2),
                                  metadata=authed(), timeout=RPC_TIMEOUT_S))
        yield server


@pytest.mark.parametrize("headers", [{}, {"authorization": f"Bearer {KEY}x"},
                                     {"authorization": KEY}, {"authorization": f"Basic {KEY}"}])
def test_kv_events_state_refuses_a_request_without_the_key(keyed, headers):
    response = httpx.get(metrics_url(keyed, "/kv_events/state"), headers=headers,
                         timeout=RPC_TIMEOUT_S)
    assert response.status_code == 401, response.text
    assert "--api-key" in response.text and "token_ids" not in response.text
    assert response.headers["www-authenticate"] == "Bearer"


def test_kv_events_state_answers_the_key(keyed):
    response = httpx.get(metrics_url(keyed, "/kv_events/state"),
                         headers={"authorization": f"bearer {KEY}"}, timeout=RPC_TIMEOUT_S)
    assert response.status_code == 200
    prompt = keyed.stub.Tokenize(pb2.TokenizeRequest(text=PROMPT), metadata=authed(),
                                 timeout=RPC_TIMEOUT_S).token_ids
    body = response.json()
    assert list(prompt[:body["block_size"]]) in [b["token_ids"] for b in body["blocks"]]


def test_metrics_stay_open_and_carry_no_prompt_data(keyed):
    response = httpx.get(metrics_url(keyed, "/metrics"), timeout=RPC_TIMEOUT_S)
    assert response.status_code == 200
    assert "secret" not in response.text and "4 8 15" not in response.text
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            assert set(sample.labels) <= METRIC_LABELS, (sample.name, sample.labels)


def test_kv_event_sockets_bind_loopback_unless_an_interface_is_named():
    with Server("--kv-events-endpoint", "tcp://*:*", "--kv-events-replay-endpoint",
                "tcp://*:*", metrics=False) as server:
        match = server.wait_for_log(r"KV cache events on (\S+) .*replay on (\S+)")
        assert match.group(1).startswith("tcp://127.0.0.1:"), match.group(0)
        assert match.group(2).startswith("tcp://127.0.0.1:"), match.group(0)
    with Server("--kv-events-endpoint", "tcp://*:*", "--kv-events-host", "0.0.0.0",
                metrics=False) as server:
        match = server.wait_for_log(r"KV cache events on (\S+)")
        assert match.group(1).startswith("tcp://0.0.0.0:"), match.group(0)


def raw_request(port, data, timeout=RPC_TIMEOUT_S):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(reply):
    return int(reply.split(b" ", 2)[1]) if reply else None


def test_metrics_refuse_oversized_requests():
    with Server(wait_ready=False) as server:
        big_header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
        assert status_of(raw_request(server.metrics_port, big_header)) == 431
        body = (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" +
                b"b" * 100000)
        assert status_of(raw_request(server.metrics_port, body)) == 413


def test_an_idle_metrics_connection_is_closed_at_the_timeout():
    with Server("--metrics-request-timeout", "0.5", wait_ready=False) as server:
        with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10) as s:
            s.sendall(b"GET /metr")  # and never the rest
            start = time.monotonic()
            assert s.recv(1) == b""  # closed by the server, not by our 10 s timeout
            assert time.monotonic() - start < 5


def open_idle_connections(port, count):
    """Connections that send nothing; those the server closes at once are kept anyway."""
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        sockets.append(s)
    return sockets


def generate_on_a_new_channel(server, timeout):
    """Token ids of a Generate on a new channel, which keeps connecting until the deadline (a
    sanitized server may still be closing the connections it was left with)."""
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb2_grpc.InferenceStub(channel)
        responses = stub.Generate(pb2.GenerateRequest(text="Hello", max_tokens=2),
                                  timeout=timeout, wait_for_ready=True)
        return [t for r in responses for t in r.token_ids]


def test_idle_metrics_connections_leave_grpc_accepting():
    """Under RLIMIT_NOFILE 128 (the server holds ~25 descriptors), 300 idle connections to the
    metrics port used to take every descriptor left: gRPC's accept then failed with EMFILE
    and its listener (gRPC 1.51) never accepted again. The metrics server holds at most
    --metrics-max-connections, so gRPC accepts while they are open and after they close."""
    with Server(descriptor_limit=128) as server:
        idle = open_idle_connections(server.metrics_port, 300)
        try:
            time.sleep(1)  # the server's accept loop has seen them all
            ids = generate_on_a_new_channel(server, timeout=10)
            assert len(ids) == 2
        finally:
            for s in idle:
                s.close()
        start = time.monotonic()
        ids = generate_on_a_new_channel(server, timeout=20)
        assert len(ids) == 2 and time.monotonic() - start < 20
        assert httpx.get(metrics_url(server, "/metrics"), timeout=10).status_code == 200
        assert not re.search(r"Failed accept4", server.log_text())


def wide_optionals_gbnf(rules, tag=""):
    """Optional printable characters around a literal, rule after rule: where each optional may
    end, nearly every token of the vocabulary runs past it and is kept as context-dependent, so
    each position's table holds most of the vocabulary. 68 rules (2.6 KB) compile to ~225 MiB
    for SmolLM2's 49152 tokens; six distinct bodies used to stay cached, ~1.3 GiB."""
    lines = ["root ::= " + " ".join(f"r{i}" for i in range(rules))]
    lines += [f'r{i} ::= [ -~]{{0,8}} "{i}{tag}" [ -~]{{0,8}}' for i in range(rules)]
    return "\n".join(lines)


def constrained(server, gbnf):
    return generate(server.stub, pb2.GenerateRequest(
        text="Hi", max_tokens=1, sampling=pb2.SamplingParams(grammar=gbnf)))


def test_a_grammar_over_the_per_grammar_cap_fails_alone_and_the_cache_keeps_its_budget():
    with Server("--grammar-max-table-mib", "64", "--grammar-cache-mib", "128") as server:
        big = wide_optionals_gbnf(68)
        assert 2500 <= len(big) <= 2700
        with pytest.raises(grpc.RpcError) as refused:
            constrained(server, big)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "--grammar-max-table-mib" in refused.value.details()
        for tag in "abcde":  # ~35 MiB each: the cache holds three
            constrained(server, wide_optionals_gbnf(10, tag))
        samples = server.metrics()
        assert 0 < samples["tokenmill:grammar_cache_bytes"] <= 128 << 20
        assert samples["tokenmill:grammar_cache_budget_bytes"] == 128 << 20
        assert 0 < samples["tokenmill:grammar_cache_entries"] < 5
        assert samples["tokenmill:grammar_cache_evictions_total"] >= 1
        constrained(server, wide_optionals_gbnf(10, "e"))  # the latest is still cached
        assert server.metrics()["tokenmill:grammar_cache_evictions_total"] == \
            samples["tokenmill:grammar_cache_evictions_total"]


def test_grpc_accepts_again_once_descriptors_free_up():
    """Idle connections to the gRPC port itself, past RLIMIT_NOFILE: accept fails with EMFILE.
    gRPC 1.51's own listener then never accepted again (its on_read returns without re-arming);
    the server's accept loop retries, so a client gets in within seconds once they close."""
    with Server(descriptor_limit=128) as server:
        idle = open_idle_connections(server.port, 300)
        time.sleep(1)  # the server has accepted all it could, and failed on the rest
        for s in idle:
            s.close()
        start = time.monotonic()
        ids = generate_on_a_new_channel(server, timeout=20)
        assert len(ids) == 2 and time.monotonic() - start < 20
        assert "Failed accept4" not in server.log_text()
