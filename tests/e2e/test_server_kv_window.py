"""kv_window (bounded-memory generation with attention sinks) over gRPC on stories260K, whose
context is 128 tokens: 4x the context completes, with KV blocks in use never above a
context's worth and usage.evicted_tokens reported; without kv_window the same request is
refused up front; a bad kv_window is refused with a message naming it."""
import grpc
import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import RPC_TIMEOUT_S, TINY_MODEL, Server, pb2

CONTEXT = 128
BLOCK_SIZE = 16


@pytest.fixture(scope="module")
def server():
    with Server("--block-size", str(BLOCK_SIZE), model=TINY_MODEL) as s:
        yield s


def story_request(max_tokens, **kwargs):
    return pb2.GenerateRequest(text="Once upon a time, there was a little girl named Lily.",
                               max_tokens=max_tokens, ignore_eos=True, **kwargs)


def test_context_is_128(server):
    assert server.stub.GetModelInfo(pb2.GetModelInfoRequest()).max_model_len == CONTEXT


def test_four_times_the_context_with_bounded_blocks(server):
    request = story_request(4 * CONTEXT, kv_window=pb2.KvWindow(sink_tokens=4))
    ids, most_blocks, last = [], 0, None
    for response in server.stub.Generate(request, timeout=RPC_TIMEOUT_S):
        ids.extend(response.token_ids)
        last = response
        most_blocks = max(most_blocks,
                          server.metrics()["tokenmill:kv_cache_blocks_in_use"])
    assert len(ids) == 4 * CONTEXT
    assert last.finish_reason == pb2.FINISH_REASON_LENGTH
    assert last.usage.completion_tokens == 4 * CONTEXT
    total = last.usage.prompt_tokens + 4 * CONTEXT
    # The last token is sampled, never computed: a context plus one are kept at most.
    assert total - CONTEXT - 1 <= last.usage.evicted_tokens < total
    assert most_blocks <= CONTEXT // BLOCK_SIZE
    samples = server.wait_for_metrics(lambda s: s["tokenmill:kv_cache_blocks_in_use"] == 0)
    assert samples["tokenmill:kv_cache_blocks_in_use"] == 0


def test_without_kv_window_the_request_is_refused(server):
    with pytest.raises(grpc.RpcError) as error:
        list(server.stub.Generate(story_request(4 * CONTEXT), timeout=RPC_TIMEOUT_S))
    assert error.value.code() == grpc.StatusCode.OUT_OF_RANGE  # past the context
    assert "kv_window" in error.value.details()


def test_without_kv_window_usage_reports_no_evictions(server):
    responses = list(server.stub.Generate(story_request(8), timeout=RPC_TIMEOUT_S))
    assert responses[-1].usage.evicted_tokens == 0


def test_sinks_leaving_no_room_are_refused(server):
    request = story_request(10, kv_window=pb2.KvWindow(sink_tokens=120))
    with pytest.raises(grpc.RpcError) as error:
        list(server.stub.Generate(request, timeout=RPC_TIMEOUT_S))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "kv_window.sink_tokens" in error.value.details()


def test_kv_window_through_the_openai_gateway(server):
    # The gateway maps kv_window (a tokenmill extension) and reports usage.evicted_tokens.
    with Gateway(backend_address(server)) as gateway:
        completion = gateway.client().completions.create(
            model=model_name(gateway), prompt="Once upon a time, there was a little girl",
            max_tokens=4 * CONTEXT, extra_body={"ignore_eos": True,
                                                 "kv_window": {"sink_tokens": 4}})
        assert completion.choices[0].finish_reason == "length"
        assert completion.usage.completion_tokens == 4 * CONTEXT
        assert completion.usage.model_extra["evicted_tokens"] >= 3 * CONTEXT
        bad = gateway.http.post("/v1/completions", json={
            "model": model_name(gateway), "prompt": "Hi", "kv_window": {"sinks": 4}})
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] == "kv_window"
