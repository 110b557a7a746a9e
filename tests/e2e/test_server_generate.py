"""tokenmill-server's Generate end to end: the real binary and the default model, driven by
the grpcio client generated from the proto."""
import sys
import pathlib
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from gguf import GGUFReader

from server_harness import DEFAULT_MODEL, RPC_TIMEOUT_S, Server, cli_generate, generate, pb2

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
from make_chat_golden import make_environment  # noqa: E402  (HF's chat environment)

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "Water boils at",
]


@pytest.fixture(scope="module")
def server():
    with Server() as s:
        yield s


def text_request(prompt, max_tokens, **kwargs):
    return pb2.GenerateRequest(text=prompt, max_tokens=max_tokens, **kwargs)


def test_stream_matches_tokenmill_generate(server):
    prompt, max_tokens = PROMPTS[1], 40
    expected = cli_generate(prompt, max_tokens)
    ids, text, responses = generate(server.stub, text_request(prompt, max_tokens,
                                                              request_id="story-1"))
    assert ids == expected["tokens"]
    assert text == expected["text"]
    assert len(responses) > 1, "the tokens must stream, not come in one message"
    assert all(r.request_id == "story-1" for r in responses)
    assert all(r.finish_reason == pb2.FINISH_REASON_UNSPECIFIED for r in responses[:-1])
    last = responses[-1]
    assert last.finish_reason == (pb2.FINISH_REASON_LENGTH if len(ids) == max_tokens
                                  else pb2.FINISH_REASON_STOP)
    prompt_ids = server.stub.Tokenize(pb2.TokenizeRequest(text=prompt)).token_ids
    assert last.usage.prompt_tokens == len(prompt_ids)
    assert last.usage.completion_tokens == len(ids)


def test_token_id_input_equals_text_input(server):
    prompt_ids = list(server.stub.Tokenize(pb2.TokenizeRequest(text=PROMPTS[0])).token_ids)
    by_text = generate(server.stub, text_request(PROMPTS[0], 12))[0]
    by_ids = generate(server.stub, pb2.GenerateRequest(
        token_ids=pb2.TokenIds(ids=prompt_ids), max_tokens=12))[0]
    assert by_ids == by_text


def test_32_concurrent_streams_all_complete_correctly(server):
    max_tokens = 16
    expected = {p: generate(server.stub, text_request(p, max_tokens))[0] for p in PROMPTS}
    jobs = [PROMPTS[i % len(PROMPTS)] for i in range(32)]

    def run(i):
        ids, text, responses = generate(server.stub,
                                        text_request(jobs[i], max_tokens, request_id=f"c{i}"))
        return ids, responses

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(run, range(32)))
    for i, (ids, responses) in enumerate(results):
        assert ids == expected[jobs[i]], f"stream {i} ({jobs[i]!r}) differs from a lone run"
        assert {r.request_id for r in responses} == {f"c{i}"}
        assert responses[-1].usage.completion_tokens == len(ids)
    samples = server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 0)
    assert samples["tokenmill:kv_cache_blocks_in_use"] == 0


def test_stop_string_ends_the_text_before_it(server):
    prompt = PROMPTS[0]
    ids, text, _ = generate(server.stub, text_request(prompt, 24))
    # A word from the middle of the continuation, as a stop string.
    words = text.split()
    stop = words[len(words) // 2]
    cut = text.index(stop)
    _, stopped_text, responses = generate(server.stub, text_request(prompt, 24, stop=[stop]))
    assert stopped_text == text[:cut]
    assert responses[-1].finish_reason == pb2.FINISH_REASON_STOP
    assert responses[-1].stop_string == stop


def test_stop_token_id_is_the_last_token(server):
    ids, _, _ = generate(server.stub, text_request(PROMPTS[2], 20))
    stop_id = ids[5]
    first = ids.index(stop_id)
    stopped, _, responses = generate(server.stub,
                                     text_request(PROMPTS[2], 20, stop_token_ids=[stop_id]))
    assert stopped == ids[:first + 1]
    assert responses[-1].finish_reason == pb2.FINISH_REASON_STOP


def test_chat_messages_are_rendered_with_the_models_template(server):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is the capital of France?"}]
    chat = pb2.Chat(messages=[pb2.ChatMessage(**m) for m in messages])
    reader = GGUFReader(str(DEFAULT_MODEL))

    def field_string(key):
        field = reader.fields[key]
        return bytes(field.parts[field.data[0]]).decode("utf-8")

    def token_text(id_key):
        tokens = reader.fields["tokenizer.ggml.tokens"]
        token_id = int(reader.fields[id_key].parts[-1][0])
        return bytes(tokens.parts[tokens.data[token_id]]).decode("utf-8")

    expected_prompt = make_environment().from_string(
        field_string("tokenizer.chat_template")).render(
        messages=messages, add_generation_prompt=True, tools=None, documents=None,
        bos_token=token_text("tokenizer.ggml.bos_token_id"),
        eos_token=token_text("tokenizer.ggml.eos_token_id"))
    tokenized = server.stub.Tokenize(pb2.TokenizeRequest(chat=chat))
    assert tokenized.prompt == expected_prompt
    # The template's markup is parsed into special tokens, nothing is added around it.
    assert list(tokenized.token_ids) == list(server.stub.Tokenize(pb2.TokenizeRequest(
        text=expected_prompt, parse_special=True, add_special_tokens=False)).token_ids)

    by_chat, text, responses = generate(server.stub, pb2.GenerateRequest(chat=chat,
                                                                         max_tokens=24))
    by_ids = generate(server.stub, pb2.GenerateRequest(
        token_ids=pb2.TokenIds(ids=tokenized.token_ids), max_tokens=24))[0]
    assert by_chat == by_ids
    assert responses[-1].usage.prompt_tokens == len(tokenized.token_ids)
    assert text  # the continuation itself is the model's business


def long_request(request_id):
    return text_request(PROMPTS[1], 4000, ignore_eos=True, request_id=request_id)


def abort_count(samples):
    return samples["tokenmill:request_success_total{finished_reason=abort}"]


def test_client_cancel_frees_the_kv_blocks(server):
    aborted_before = abort_count(server.metrics())
    call = server.stub.Generate(long_request("to-cancel"), timeout=RPC_TIMEOUT_S)
    for _ in range(3):
        next(call)
    running = server.metrics()
    assert running["tokenmill:num_requests_running"] == 1
    assert running["tokenmill:kv_cache_blocks_in_use"] > 0
    call.cancel()
    server.wait_for_metrics(lambda m: m["tokenmill:kv_cache_blocks_in_use"] == 0
                            and m["tokenmill:num_requests_running"] == 0
                            and abort_count(m) == aborted_before + 1)
    server.wait_for_log(r"request to-cancel cancelled by the client")


def test_expired_deadline_aborts_and_frees_the_kv_blocks(server):
    aborted_before = abort_count(server.metrics())
    with pytest.raises(grpc.RpcError) as error:
        generate(server.stub, long_request("short-deadline"), timeout=1.0)
    assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    server.wait_for_metrics(lambda m: m["tokenmill:kv_cache_blocks_in_use"] == 0
                            and m["tokenmill:num_requests_running"] == 0
                            and abort_count(m) == aborted_before + 1)


def test_metrics_count_tokens_and_latencies(server):
    before = server.metrics()
    ids, _, responses = generate(server.stub, text_request(PROMPTS[3], 8))
    # The histograms move on the final event, the engine's counters after its step: wait
    # for both.
    after = server.wait_for_metrics(
        lambda m: m["tokenmill:e2e_request_latency_seconds_count"] ==
        before["tokenmill:e2e_request_latency_seconds_count"] + 1 and
        m["tokenmill:generation_tokens_total"] >= before["tokenmill:generation_tokens_total"] +
        len(ids))
    assert (after["tokenmill:generation_tokens_total"] -
            before["tokenmill:generation_tokens_total"]) == len(ids)
    usage = responses[-1].usage
    assert (after["tokenmill:prompt_tokens_total"] - before["tokenmill:prompt_tokens_total"]
            == usage.prompt_tokens - usage.cached_prompt_tokens)
    for name in ("time_to_first_token_seconds", "request_queue_time_seconds"):
        assert (after[f"tokenmill:{name}_count"] - before[f"tokenmill:{name}_count"]) == 1
    assert (after["tokenmill:time_per_output_token_seconds_count"] -
            before["tokenmill:time_per_output_token_seconds_count"]) == len(ids) - 1
    assert after["tokenmill:prefix_cache_queries_total"] > before[
        "tokenmill:prefix_cache_queries_total"]


def test_vllm_compat_metrics_mirror_tokenmills():
    """--metrics-compat vllm: the names inference gateways' endpoint pickers read, each equal to
    tokenmill's own in the same scrape."""
    with Server("--metrics-compat", "vllm", "--block-size", "8") as s:
        prompt = " ".join(PROMPTS)  # long enough for whole blocks, so the second run hits
        for _ in range(2):
            generate(s.stub, text_request(prompt, 4))
        m = s.wait_for_metrics(lambda m: m["tokenmill:prefix_cache_hits_total"] > 0
                               and m["tokenmill:num_requests_running"] == 0)
        for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                     "prefix_cache_queries_total", "prefix_cache_hits_total"):
            assert m[f"vllm:{name}{{engine=0}}"] == m[f"tokenmill:{name}"], name
        assert m["vllm:gpu_cache_usage_perc{engine=0}"] == m["tokenmill:kv_cache_usage_perc"]
        blocks = int(m["tokenmill:kv_cache_blocks"])
        assert m[f"vllm:cache_config_info{{block_size=8,engine=0,num_gpu_blocks={blocks}}}"] == 1
    with Server() as s:  # off by default
        assert not [name for name in s.metrics() if name.startswith("vllm:")]


def chat_request(content, **kwargs):
    return pb2.GenerateRequest(
        chat=pb2.Chat(messages=[pb2.ChatMessage(role="user", content=content)]), **kwargs)


def test_max_tokens_rest_of_context_counts_the_templated_prompt():
    # The server counts the prompt after the chat template: no Tokenize call first.
    context = 96
    with Server("--max-model-len", context, metrics=False) as small:
        question = "Count from one to one hundred."
        request = chat_request(question, ignore_eos=True, max_tokens_rest_of_context=True)
        prompt_ids = small.stub.Tokenize(pb2.TokenizeRequest(chat=request.chat),
                                         timeout=RPC_TIMEOUT_S).token_ids
        assert 0 < len(prompt_ids) < context
        ids, _, responses = generate(small.stub, request)
        last = responses[-1]
        assert last.usage.prompt_tokens == len(prompt_ids)
        assert len(ids) == last.usage.completion_tokens == context - len(prompt_ids)
        assert last.finish_reason == pb2.FINISH_REASON_LENGTH
        # Without the flag the default stays 16; a max_tokens given wins over the flag.
        assert len(generate(small.stub, chat_request(question, ignore_eos=True))[0]) == 16
        assert len(generate(small.stub, chat_request(
            question, ignore_eos=True, max_tokens=5, max_tokens_rest_of_context=True))[0]) == 5


def test_logprobs_carry_each_tokens_text_as_detokenize_gives_it(server):
    # A chat answer ends with <|im_end|>, a control token: its text is itself.
    for request in (text_request(PROMPTS[0], 8, logprobs=True, top_logprobs=5),
                    chat_request("Say hi.", max_tokens=48, logprobs=True, top_logprobs=3)):
        ids, _, responses = generate(server.stub, request)
        logprobs = [l for r in responses for l in r.logprobs]
        assert [l.chosen.token_id for l in logprobs] == ids
        entries = [l.chosen for l in logprobs] + [t for l in logprobs for t in l.top]
        for entry in entries:
            detokenized = server.stub.Detokenize(
                pb2.DetokenizeRequest(token_ids=[entry.token_id], render_special=True),
                timeout=RPC_TIMEOUT_S).text
            assert entry.text == detokenized, entry.token_id
        assert any(entry.text for entry in entries)
        if responses[-1].finish_reason == pb2.FINISH_REASON_STOP and request.HasField("chat"):
            assert logprobs[-1].chosen.text == "<|im_end|>"
