"""/v1/completions' echo, prompt logprobs (vLLM's prompt_logprobs, OpenAI's echo with logprobs)
and best_of, through the official `openai` package against the real binaries. The prompt's
log-probabilities are checked against llama.cpp's (llama-cpp-python, teacher-forced one token
at a time) on the default model."""
import numpy as np
import pytest
from llama_cpp import Llama

from gateway_harness import Gateway, backend_address, model_name
from server_harness import DEFAULT_MODEL, TINY_MODEL, Server, generate, pb2

PROMPT = "The capital of France is Paris, and the capital of Italy is"
# Over three KV blocks of 16 tokens: enough for the prefix cache to serve a repeat.
LONG_PROMPT = ("You are a helpful assistant for the tokenmill project. Answer briefly and "
               "precisely, in plain English, without lists or code unless asked for them. "
               "Question: what is the tallest mountain in Europe?")
# As test_server_sampling.py holds the default model's logprobs to llama.cpp's: Q4_1 through
# 30 layers differs by tenths of a nat at worst.
TOLERANCE = 0.5


def prompt_ids(server, text):
    return list(server.stub.Tokenize(pb2.TokenizeRequest(text=text)).token_ids)


def llama_cpp_log_softmax(model, ids):
    """llama.cpp's log-softmax at each prompt position but the last, teacher-forced one token
    at a time (as tests/reference/make_logprobs_golden.py records generated tokens')."""
    llm = Llama(model_path=str(model), n_ctx=128, n_threads=1, n_batch=1, n_ubatch=1,
                logits_all=True, verbose=False, seed=0)
    llm.eval(ids)
    rows = []
    for position in range(len(ids) - 1):
        row = np.asarray(llm.scores[position], dtype=np.float64)
        top = row.max()
        rows.append(row - (top + np.log(np.exp(row - top).sum())))
    return rows


@pytest.fixture(scope="module")
def llama_cpp_prompt_logprobs(server):
    ids = prompt_ids(server, PROMPT)
    return ids, llama_cpp_log_softmax(DEFAULT_MODEL, ids)


def test_grpc_prompt_logprobs_equal_llama_cpp_on_the_f32_model():
    # stories260K is F32: within 1e-4 nats of llama.cpp, as its generated tokens' logprobs
    # (test_server_sampling.py). Straight over gRPC: one entry per prompt token.
    with Server(model=TINY_MODEL) as tiny:
        ids = prompt_ids(tiny, "Once upon a time, there was a purple elephant named Lily.")
        _, _, responses = generate(tiny.stub, pb2.GenerateRequest(
            token_ids=pb2.TokenIds(ids=ids), max_tokens=2, prompt_logprobs=3, logprobs=True))
    entries = [e for r in responses for e in r.prompt_logprobs]
    assert [e.chosen.token_id for e in entries] == ids
    assert entries[0].chosen.logprob == 0 and not entries[0].top
    reference = llama_cpp_log_softmax(TINY_MODEL, ids)
    worst = 0.0
    for entry, row in zip(entries[1:], reference):
        assert [t.token_id for t in entry.top] == list(np.argsort(-row, kind="stable")[:3])
        for t in [entry.chosen, *entry.top]:
            worst = max(worst, abs(t.logprob - row[t.token_id]))
        # rank: 1 + the tokens more likely, in the whole vocabulary (within llama.cpp's
        # rounding of near ties), inside the top 3 or not.
        assert [t.rank for t in entry.top] == [1, 2, 3]
        chosen = row[entry.chosen.token_id]
        surely_above, maybe_above = (row > chosen + 1e-3).sum(), (row > chosen - 1e-3).sum()
        assert 1 + surely_above <= entry.chosen.rank <= maybe_above  # it counts itself too
    assert worst < 1e-4, f"largest |ours - llama.cpp| = {worst:.6f} nats"
    assert max(e.chosen.rank for e in entries) > 3  # some outside the top
    # The generated tokens' too: greedy picks the most likely, rank 1.
    assert [l.chosen.rank for r in responses for l in r.logprobs] == [1, 1]


def test_echo_returns_the_prompt_before_the_completion(client, model):
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=6)
    echoed = client.completions.create(model=model, prompt=PROMPT, max_tokens=6, echo=True)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    assert echoed.usage == plain.usage
    chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=6, echo=True,
                                            stream=True))
    assert chunks[0].choices[0].text == PROMPT
    assert "".join(c.choices[0].text for c in chunks) == echoed.choices[0].text


def test_echo_with_logprobs_matches_llama_cpp(server, client, model, llama_cpp_prompt_logprobs):
    ids, reference = llama_cpp_prompt_logprobs
    out = client.completions.create(model=model, prompt=PROMPT, max_tokens=3, echo=True,
                                    logprobs=5, extra_body={"prompt_logprobs": 5})
    choice = out.choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(ids) + 3
    # Nothing precedes the first prompt token.
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.text_offset[0] == 0
    detokenized = [server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=[i],
                                                                render_special=True)).text
                   for i in ids]
    assert lp.tokens[:len(ids)] == detokenized
    # vLLM's prompt_logprobs: null, then {token id: {logprob, rank, decoded_token}}.
    prompt_logprobs = choice.model_extra["prompt_logprobs"]
    assert len(prompt_logprobs) == len(ids) and prompt_logprobs[0] is None
    worst = 0.0
    for i in range(1, len(ids)):
        row = reference[i - 1]
        ours = lp.token_logprobs[i]
        worst = max(worst, abs(ours - row[ids[i]]))
        assert len(lp.top_logprobs[i]) == 5
        entry = prompt_logprobs[i]
        assert entry[str(ids[i])]["logprob"] == pytest.approx(ours, abs=1e-6)
        assert entry[str(ids[i])]["decoded_token"] == lp.tokens[i]
        assert len(entry) in (5, 6)  # the top 5, plus the prompt's token when outside them
        ranked = sorted((v["rank"], int(k)) for k, v in entry.items())
        # The top 5, then the prompt's token (its rank in the whole vocabulary) when outside.
        assert [r for r, _ in ranked][:5] == [1, 2, 3, 4, 5]
        assert len(entry) == 5 or ranked[5] == (entry[str(ids[i])]["rank"], ids[i])
        assert len(entry) == 5 or ranked[5][0] > 5
        ranked = ranked[:5]
        # Each of our top 5 too, as test_server_sampling.py compares generated tokens' logprobs.
        for _, token in ranked:
            worst = max(worst, abs(entry[str(token)]["logprob"] - row[token]))
    assert worst < TOLERANCE, f"largest |ours - llama.cpp| = {worst:.4f} nats"
    # The completion's own logprobs follow, at offsets past the prompt.
    assert lp.text_offset[len(ids)] == len(PROMPT)
    assert all(l is not None for l in lp.token_logprobs[len(ids):])


def test_echo_with_max_tokens_zero_scores_the_prompt_alone(client, model):
    # What lm-evaluation-harness sends to score a prompt.
    out = client.completions.create(model=model, prompt=PROMPT, max_tokens=0, echo=True,
                                    logprobs=1, temperature=0)
    assert out.choices[0].text == PROMPT
    assert out.usage.completion_tokens == 0
    assert out.choices[0].logprobs.token_logprobs[0] is None
    assert all(l < 0 for l in out.choices[0].logprobs.token_logprobs[1:])


def test_streamed_echo_with_logprobs_adds_up_to_the_whole(client, model):
    whole = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, echo=True,
                                      logprobs=2, extra_body={"prompt_logprobs": 1})
    chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=4, echo=True,
                                            logprobs=2, stream=True,
                                            extra_body={"prompt_logprobs": 1}))
    first = chunks[0].choices[0]
    assert first.text == PROMPT
    assert first.model_extra["prompt_logprobs"] == whole.choices[0].model_extra["prompt_logprobs"]
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs
              for t in c.choices[0].logprobs.tokens]
    logprobs = [t for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.token_logprobs]
    assert tokens == whole.choices[0].logprobs.tokens
    assert logprobs == whole.choices[0].logprobs.token_logprobs


def test_prompt_logprobs_skip_prefix_cache_reads(client, model):
    def cached(**extra):
        out = client.completions.create(model=model, prompt=LONG_PROMPT, max_tokens=1,
                                        extra_body=extra)
        return out.usage.prompt_tokens_details.cached_tokens

    cached()
    assert cached() > 0  # a repeat is served from the cache...
    assert cached(prompt_logprobs=0) == 0  # ...but not one whose prompt positions need logits
    assert cached() > 0


def test_best_of_returns_the_n_most_likely_of_its_candidates(client, model):
    common = dict(model=model, prompt="Once upon a time", max_tokens=8, temperature=1.0,
                  seed=1234, extra_body={"ignore_eos": True})
    # Sequence i draws from (seed, i): the n = 4 request generates best_of = 4's candidates.
    candidates = client.completions.create(n=4, logprobs=0, **common)
    totals = sorted(((sum(c.logprobs.token_logprobs), c.text) for c in candidates.choices),
                    key=lambda t: -t[0])
    best = client.completions.create(n=2, best_of=4, **common)
    assert [c.text for c in best.choices] == [text for _, text in totals[:2]]
    assert [c.index for c in best.choices] == [0, 1]
    assert all(c.logprobs is None for c in best.choices)  # ranked by them, not asked for
    assert best.usage.completion_tokens == 4 * 8  # every candidate counts
    with_logprobs = client.completions.create(n=1, best_of=4, logprobs=1, **common)
    assert sum(with_logprobs.choices[0].logprobs.token_logprobs) == pytest.approx(totals[0][0],
                                                                                  abs=1e-4)


def test_echo_with_several_prompts_and_n_gives_each_choice_its_prompt(server, client, model):
    prompts = ["One, two, three,", PROMPT]
    out = client.completions.create(model=model, prompt=prompts, n=2, max_tokens=3, echo=True,
                                    logprobs=1, temperature=1.0, seed=7)
    assert len(out.choices) == 4
    for choice in out.choices:
        prompt = prompts[choice.index // 2]
        assert choice.text.startswith(prompt)
        num_prompt = len(prompt_ids(server, prompt))
        lp = choice.logprobs
        assert len(lp.tokens) == num_prompt + 3
        assert lp.token_logprobs[0] is None
        assert all(l is not None for l in lp.token_logprobs[1:])
        assert lp.text_offset[num_prompt] == len(prompt)


def test_a_long_prompts_entries_span_several_responses(server, client, model):
    # Over 1024 entries (the most one response carries, to stay under gRPC's 4 MB limit).
    text = "one two three four five six seven eight nine ten " * 120
    ids = prompt_ids(server, text)
    assert len(ids) > 1024
    _, _, responses = generate(server.stub, pb2.GenerateRequest(text=text, max_tokens=1,
                                                                prompt_logprobs=20))
    sizes = [len(r.prompt_logprobs) for r in responses if r.prompt_logprobs]
    assert len(sizes) > 1 and max(sizes) <= 1024
    assert [e.chosen.token_id for r in responses for e in r.prompt_logprobs] == ids
    assert all(r.usage.prompt_tokens == len(ids) for r in responses)
    # A stream's first chunk still has them all.
    chunks = list(client.completions.create(model=model, prompt=text, max_tokens=1, echo=True,
                                            stream=True, extra_body={"prompt_logprobs": 0}))
    assert chunks[0].choices[0].text == text
    assert len(chunks[0].choices[0].model_extra["prompt_logprobs"]) == len(ids)


def detokenized(server, ids):
    # What vLLM echoes for a token-id prompt: tokenizer.decode, special tokens as themselves.
    return server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=ids, render_special=True)).text


def test_echo_of_token_id_prompts_is_their_detokenized_text(server, client, model):
    ids = prompt_ids(server, PROMPT)
    im_start = list(server.stub.Tokenize(pb2.TokenizeRequest(text="<|im_start|>",
                                                             parse_special=True)).token_ids)
    special = im_start + prompt_ids(server, "One, two, three,")
    by_text = client.completions.create(model=model, prompt=PROMPT, max_tokens=3, echo=True,
                                        logprobs=2, extra_body={"prompt_logprobs": 1})
    by_ids = client.completions.create(model=model, prompt=ids, max_tokens=3, echo=True,
                                       logprobs=2, extra_body={"prompt_logprobs": 1})
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.choices[0].logprobs == by_text.choices[0].logprobs
    assert (by_ids.choices[0].model_extra["prompt_logprobs"] ==
            by_text.choices[0].model_extra["prompt_logprobs"])
    # A list of token-id lists: each choice echoes its own prompt; a control token as itself.
    both = client.completions.create(model=model, prompt=[ids, special], max_tokens=2, echo=True)
    assert both.choices[0].text.startswith(detokenized(server, ids))
    assert both.choices[1].text.startswith(detokenized(server, special))
    assert both.choices[1].text.startswith("<|im_start|>One, two, three,")
    only = client.completions.create(model=model, prompt=special, max_tokens=0, echo=True)
    assert only.choices[0].text == detokenized(server, special)
    chunks = list(client.completions.create(model=model, prompt=[ids, special], max_tokens=2,
                                            echo=True, stream=True))
    for index, prompt in enumerate([ids, special]):
        own = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        assert own[0].text == detokenized(server, prompt)
        assert "".join(c.text for c in own) == both.choices[index].text


def test_streamed_prompt_logprobs_with_n_give_each_choice_the_prompts_entries(client, model):
    prompts = [PROMPT, "One, two, three,"]
    common = dict(model=model, prompt=prompts, n=3, max_tokens=4, echo=True, logprobs=2,
                  temperature=1.0, seed=7, extra_body={"prompt_logprobs": 1})
    whole = client.completions.create(**common)
    chunks = list(client.completions.create(stream=True, **common))
    assert len(whole.choices) == 6
    for choice in whole.choices:
        own = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == choice.index]
        assert own[0].text == prompts[choice.index // 3]
        assert own[0].model_extra["prompt_logprobs"] == choice.model_extra["prompt_logprobs"]
        assert all("prompt_logprobs" not in c.model_extra for c in own[1:])
        assert "".join(c.text for c in own) == choice.text
        assert [t for c in own if c.logprobs for t in c.logprobs.tokens] == choice.logprobs.tokens
        assert ([l for c in own if c.logprobs for l in c.logprobs.token_logprobs] ==
                choice.logprobs.token_logprobs)


def test_streamed_prompt_entries_wait_for_sequence_0_when_the_others_run_ahead():
    # Without the prefix cache the other sequences do not wait for sequence 0's prompt, which
    # takes 256 tokens a step with prompt_logprobs: all three prompts begin in one step (no
    # limit on prefills a step), so they generate first, and their chunks wait.
    text = "one two three four five six seven eight nine ten " * 40
    with Server("--no-prefix-cache", "--max-prefills-per-step", "0") as server, \
            Gateway(backend_address(server)) as gateway:
        _, _, responses = generate(server.stub, pb2.GenerateRequest(
            text=text, n=3, max_tokens=4, prompt_logprobs=0,
            sampling=pb2.SamplingParams(temperature=1.0, seed=3)))
        assert [r.index for r in responses if r.token_ids][0] != 0  # they do run ahead
        client, model = gateway.client(), model_name(gateway)
        common = dict(model=model, prompt=text, n=3, max_tokens=4, temperature=1.0, seed=3,
                      extra_body={"prompt_logprobs": 0})
        whole = client.completions.create(**common)
        chunks = list(client.completions.create(stream=True, **common))
    assert len({c.text for c in whole.choices}) > 1
    for choice in whole.choices:
        own = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == choice.index]
        assert own[0].model_extra["prompt_logprobs"] == choice.model_extra["prompt_logprobs"]
        assert len(own[0].model_extra["prompt_logprobs"]) == whole.usage.prompt_tokens
        assert "".join(c.text for c in own) == choice.text


def test_prompt_logprobs_rank_is_the_tokens_rank_in_the_vocabulary(server, client, model):
    # vLLM's rank: the prompt token's place in the whole vocabulary, inside the top or not.
    ids = prompt_ids(server, PROMPT)

    def entries(top):
        out = client.completions.create(model=model, prompt=PROMPT, max_tokens=1,
                                        extra_body={"prompt_logprobs": top})
        return out.choices[0].model_extra["prompt_logprobs"]

    alone, top20 = entries(0), entries(20)
    outside = 0
    for i in range(1, len(ids)):
        chosen = alone[i][str(ids[i])]
        assert isinstance(chosen["rank"], int) and chosen["rank"] >= 1, chosen
        assert top20[i][str(ids[i])]["rank"] == chosen["rank"]
        if chosen["rank"] > 20:
            outside += 1
            assert len(top20[i]) == 21  # the top 20 ranked 1-20, then the prompt's token
        else:
            assert len(top20[i]) == 20
        assert sorted(v["rank"] for v in top20[i].values())[:20] == list(range(1, 21))
    assert outside > 0  # the prompt has tokens outside the top 20: their rank is known too
