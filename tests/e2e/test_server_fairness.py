"""One tenant cannot take the machine (issue 35): while tenant A's hog (4 requests × n = 16
long sequences) fills a small KV cache, tenant B's small request is admitted within a few
steps and answers in seconds, not after the hog."""
import threading
import time

import grpc

from server_harness import Server, pb2

API_KEY = "fairness-test-key"
# Tokens of the hog's prompt (token ids, so the length is exact).
HOG_PROMPT = list(range(1000, 1040))


def as_tenant(tenant):
    return [("authorization", f"Bearer {API_KEY}"), ("x-tokenmill-tenant", tenant)]


def test_a_small_tenant_is_served_while_a_hog_fills_the_kv_cache():
    # About 700 tokens of KV: a handful of the hog's 64 sequences fill it.
    with Server("--api-key", API_KEY, "--kv-cache-memory", "16MiB",
                log_level="info") as server:
        hog_calls = []
        hog_started = threading.Event()

        def hog():
            request = pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=HOG_PROMPT), max_tokens=300,
                                          ignore_eos=True, n=16)
            call = server.stub.Generate(request, metadata=as_tenant("a"), timeout=300)
            hog_calls.append(call)
            try:
                for _ in call:
                    hog_started.set()
            except grpc.RpcError:
                pass  # cancelled at the end

        threads = [threading.Thread(target=hog) for _ in range(4)]
        for thread in threads:
            thread.start()
        assert hog_started.wait(60)
        time.sleep(2)  # the hog fills the cache
        begin = time.monotonic()
        small = pb2.GenerateRequest(text="Hello", max_tokens=4, ignore_eos=True)
        responses = list(server.stub.Generate(small, metadata=as_tenant("b"), timeout=20))
        took = time.monotonic() - begin
        hog_still_running = any(not call.done() for call in hog_calls)
        for call in hog_calls:
            call.cancel()
        for thread in threads:
            thread.join(60)
        assert responses[-1].usage.completion_tokens == 4
        assert hog_still_running, "the hog ended first: the test proves nothing"
        assert took < 10, f"tenant b waited {took:.1f} s behind tenant a's hog"
