"""Beam search through the APIs, against the real binaries on the default model: vLLM's
use_beam_search and length_penalty on /v1/completions and /v1/chat/completions through the
official `openai` package (n is the width; the n choices come back best first, not streamed),
and GenerateRequest.beam_search over gRPC, whose final responses carry cumulative_logprob in
the order of vLLM's score."""
import re

import grpc
import openai
import pytest

from server_harness import generate, pb2

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name a color."}]
BEAM = {"use_beam_search": True}


def complete(client, model, **kwargs):
    args = {"model": model, "prompt": PROMPT, "max_tokens": 12}
    args.update(kwargs)
    return client.completions.create(**args)


def refusal(call):
    with pytest.raises(openai.BadRequestError) as error:
        call()
    return error.value.body


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_beam_search_is_not_streamed(client, model, endpoint):
    def call():
        if endpoint == "chat":
            return client.chat.completions.create(model=model, messages=CHAT, max_tokens=4,
                                                  stream=True, extra_body=BEAM)
        return complete(client, model, stream=True, extra_body=BEAM)

    body = refusal(call)
    assert body["param"] == "stream", body
    assert "beam search is not streamed" in body["message"], body
    assert "drop stream" in body["message"], body


def test_best_of_with_beam_search_says_to_use_n(client, model):
    body = refusal(lambda: complete(client, model, n=2, best_of=4, extra_body=BEAM))
    assert body["param"] == "best_of", body
    assert "n = 2 is the beam width" in body["message"] and "set n" in body["message"], body


def test_width_one_is_greedy_decoding(client, model):
    # ignore_eos on both: an end-of-generation token among a step's two candidates would
    # otherwise be a finished hypothesis of its own, which may score better than the greedy
    # continuation under the length normalization.
    greedy = complete(client, model, temperature=0, max_tokens=16,
                      extra_body={"ignore_eos": True})
    beam = complete(client, model, max_tokens=16, extra_body={**BEAM, "ignore_eos": True})
    assert [c.index for c in beam.choices] == [0]
    assert beam.choices[0].text == greedy.choices[0].text
    assert beam.choices[0].finish_reason == "length"
    assert beam.usage.completion_tokens == greedy.usage.completion_tokens == 16


def test_n_beams_are_n_distinct_choices_best_first(client, model):
    out = complete(client, model, n=4, extra_body=BEAM)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    texts = [c.text for c in out.choices]
    assert len(set(texts)) == 4, texts
    assert all(c.finish_reason in ("stop", "length") for c in out.choices)
    assert out.usage.completion_tokens > 0
    # The same request answers the same: beam search is deterministic.
    assert [c.text for c in complete(client, model, n=4, extra_body=BEAM).choices] == texts


def test_chat_beam_search(client, model):
    out = client.chat.completions.create(model=model, messages=CHAT, max_tokens=8, n=3,
                                         extra_body={**BEAM, "length_penalty": 0.5})
    assert [c.index for c in out.choices] == [0, 1, 2]
    texts = [c.message.content for c in out.choices]
    assert all(isinstance(t, str) for t in texts), texts
    assert len(set(texts)) == 3, texts
    assert all(c.finish_reason in ("stop", "length") for c in out.choices)


def test_length_penalty_without_beam_search_is_ignored_and_logged_once(gateway, client, model):
    plain = complete(client, model, temperature=0)
    for _ in range(2):
        out = complete(client, model, temperature=0, extra_body={"length_penalty": 2.0})
        assert out.choices[0].text == plain.choices[0].text
    lines = re.findall(r"completions: accepting and ignoring `length_penalty`: .*",
                       gateway.log_text())
    assert len(lines) == 1, lines


def test_sampling_with_beam_search_is_a_400_naming_the_field(client, model):
    body = refusal(lambda: complete(client, model, temperature=0.7, extra_body=BEAM))
    assert body["param"] == "temperature", body
    assert "beam" in body["message"].lower(), body


def beam_request(n, length_penalty=None, **fields):
    beam = pb2.BeamSearch() if length_penalty is None else pb2.BeamSearch(
        length_penalty=length_penalty)
    return pb2.GenerateRequest(text=PROMPT, max_tokens=12, n=n, beam_search=beam, **fields)


def score(response, length_penalty):
    """vLLM's: the cumulative log-probability over the length, the prompt's included and an
    ending end-of-generation token not."""
    usage = response.usage
    length = usage.prompt_tokens + usage.completion_tokens - (
        1 if response.finish_reason == pb2.FINISH_REASON_STOP else 0)
    return response.cumulative_logprob / length ** length_penalty


@pytest.mark.parametrize("length_penalty", [None, 0.0, 2.0])
def test_grpc_final_responses_carry_cumulative_logprob_in_score_order(server, length_penalty):
    _, _, responses = generate(server.stub, beam_request(4, length_penalty))
    final = {}
    for r in responses:
        if r.finish_reason != pb2.FINISH_REASON_UNSPECIFIED:
            assert r.index not in final, "one final response per hypothesis"
            final[r.index] = r
    assert sorted(final) == [0, 1, 2, 3]
    hypotheses = [final[i] for i in range(4)]
    for r in hypotheses:
        assert r.HasField("cumulative_logprob"), r
        assert r.cumulative_logprob <= 0
        # Not streamed: the hypothesis's tokens all come with its final response.
        assert len(r.token_ids) == r.usage.completion_tokens > 0
    scores = [score(r, 1.0 if length_penalty is None else length_penalty) for r in hypotheses]
    for better, worse in zip(scores, scores[1:]):
        assert better >= worse - 1e-9 * abs(worse), scores
    assert len({tuple(r.token_ids) for r in hypotheses}) == 4


def test_grpc_sampled_requests_carry_no_cumulative_logprob(server):
    _, _, responses = generate(server.stub, pb2.GenerateRequest(text=PROMPT, max_tokens=4))
    assert not any(r.HasField("cumulative_logprob") for r in responses)


@pytest.mark.parametrize("request_,message", [
    (beam_request(2, sampling=pb2.SamplingParams(temperature=0.7)), "beam"),
    (beam_request(2, length_penalty=float("nan")),
     "beam_search.length_penalty must be a finite number, got nan"),
    (beam_request(2, length_penalty=float("inf")),
     "beam_search.length_penalty must be a finite number, got inf"),
], ids=["temperature", "nan length_penalty", "infinite length_penalty"])
def test_grpc_invalid_beam_search_is_invalid_argument(server, request_, message):
    with pytest.raises(grpc.RpcError) as error:
        generate(server.stub, request_)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error.value.details()
    assert message in error.value.details().lower()
