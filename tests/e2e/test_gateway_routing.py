"""Two tokenmill-servers behind one gateway: prefix affinity sends requests that share a system
prompt to the same backend (whose prefix cache then hits), and a backend that goes away loses
its requests to the other one."""

import time

import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import Server


@pytest.fixture(scope="module")
def servers():
    with Server() as a, Server() as b:
        yield a, b


def routed(gateway, servers):
    """Generate calls each backend has received, from the gateway's /metrics."""
    m = gateway.metrics()
    return [m[f"tokenmill_gateway:backend_requests_total{{backend={backend_address(s)}}}"]
            for s in servers]


def wait_all_healthy(gateway, servers, timeout=120):
    """Until the gateway counts every backend healthy: its /health turns 200 with the first, and
    a request sent before the second is up goes to the first whatever its affinity."""
    deadline = time.monotonic() + timeout
    names = [f"tokenmill_gateway:backend_healthy{{backend={backend_address(s)}}}" for s in servers]
    while not all(gateway.metrics().get(name) == 1 for name in names):
        assert time.monotonic() < deadline, "a backend never became healthy"
        time.sleep(0.05)


def test_same_system_prompt_goes_to_the_same_backend(servers):
    with Gateway(*map(backend_address, servers)) as g:
        wait_all_healthy(g, servers)
        client = g.client()
        model = model_name(g)
        for system_index in range(3):
            system = (f"You are assistant number {system_index}. You answer questions about "
                      "the tokenmill inference server in one short sentence.")
            before = routed(g, servers)
            usages = []
            for question in ("What is a KV cache?", "What is a token?", "What is batching?"):
                out = client.chat.completions.create(
                    model=model, max_tokens=1,
                    messages=[{"role": "system", "content": system},
                              {"role": "user", "content": question}])
                usages.append(out.usage)
            after = routed(g, servers)
            delta = [x - y for x, y in zip(after, before)]
            # All three on one backend...
            assert sorted(delta) == [0, 3], delta
            # ...whose prefix cache serves the system prompt to the second and third.
            assert usages[0].prompt_tokens_details.cached_tokens == 0
            assert all(u.prompt_tokens_details.cached_tokens >= 16 for u in usages[1:])


def test_different_system_prompts_spread_over_the_backends(servers):
    with Gateway(*map(backend_address, servers)) as g:
        wait_all_healthy(g, servers)
        client = g.client()
        model = model_name(g)
        for i in range(16):
            client.chat.completions.create(
                model=model, max_tokens=1,
                messages=[{"role": "system", "content": f"You are spread test {i}."},
                          {"role": "user", "content": "Hi"}])
        # Rendezvous hashing of 16 keys leaves one backend empty with probability 2^-15.
        counts = routed(g, servers)
        assert sum(counts) == 16 and min(counts) >= 1, counts


def test_a_backend_that_goes_away_loses_its_requests_to_the_other():
    with Server() as a, Server() as b:
        with Gateway(backend_address(a), backend_address(b)) as g:
            client = g.client()
            model = model_name(g)
            messages = [{"role": "system", "content": "You are a fallback test."},
                        {"role": "user", "content": "Hi"}]
            client.chat.completions.create(model=model, max_tokens=1, messages=messages)
            counts = routed(g, (a, b))
            chosen, other = (a, b) if counts[0] == 1 else (b, a)
            chosen.close()  # SIGTERM: it drains and exits
            g.wait_for_log(rf"backend {backend_address(chosen)} is not ready")
            out = client.chat.completions.create(model=model, max_tokens=1, messages=messages)
            assert out.usage.completion_tokens == 1
            assert routed(g, (a, b))[[a, b].index(other)] == 1
            # The other one still serves while the first is gone; /health stays 200.
            assert g.http.get("/health").status_code == 200
