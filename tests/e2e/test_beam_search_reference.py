"""Beam search over gRPC against a beam search written here in Python over tokenmill's own
teacher-forced logprobs: the hypotheses (token ids, order, finish reasons) and their
cumulative_logprob must be equal exactly. On stories260K: widths 1-8, EOS honoured or ignored,
and a stop id ending hypotheses at several lengths under length penalties 1, 0.5 and 2; on
SmolLM2: widths 1, 2, 4, 8 on two chat prompts, one answered in a few tokens and EOS, EOS
honoured or ignored, length penalties 0.5 and 2; on the default model scripts/serve serves:
widths 1, 2, 4 (skipped when scripts/setup has not fetched it). Width 1 is greedy decoding.

The reference is vLLM's beam search, the one engine/beam_search.cc implements: one empty beam;
each step every live beam, in order, offers its 2*width most likely next tokens (ties: the
lower id first) with their raw log-softmax; a candidate's cumulative is its beam's plus that
(float64 sums of the float32 logprobs, in that order); a candidate whose token ends the output
(an end-of-generation id unless ignore_eos, or a stop id) is a finished hypothesis, the others
are ranked by cumulative / (prompt + output tokens) ** length_penalty, best first, equal scores
keeping their order (Python's sorted is stable, as the engine's std::stable_sort), and the best
`width` become the beams. After max_tokens steps (or when no candidate is left), the finished
hypotheses and the beams, ranked by the same score (an ending token not counted in the length),
best `width` first, are the result.

A beam's candidates come from teacher forcing: a greedy request for the prompt plus the beam's
tokens, max_tokens 1, logprobs with top_logprobs 2*width; the first response's top entries are
the candidates (tokenmill's logits do not depend on the batch, the prefix cache or the chunking,
so they are the engine's beam's own). These requests hit the prefix cache and are cheap."""
import numpy as np
import pytest

from server_harness import DEFAULT_MODEL, SERVE_MODEL, TINY_MODEL, Server, generate, pb2


class Reference:
    """The Python beam search over one server's teacher-forced logprobs."""

    def __init__(self, server):
        self.stub = server.stub
        info = self.stub.GetModelInfo(pb2.GetModelInfoRequest())
        self.end_of_generation_ids = {t.id for t in info.end_of_generation_tokens}
        self.max_model_len = info.max_model_len
        self._candidates = {}
        self.requests = 0

    def candidates(self, tokens, k):
        """The k most likely next tokens after `tokens`: [(id, float32 logprob as a float)]."""
        key = (tuple(tokens), k)
        if key not in self._candidates:
            ids, _, responses = generate(self.stub, pb2.GenerateRequest(
                token_ids=pb2.TokenIds(ids=tokens), max_tokens=1, logprobs=True, top_logprobs=k,
                sampling=pb2.SamplingParams(temperature=0)))
            self.requests += 1
            top = responses[0].logprobs[0].top
            assert len(top) == k
            assert ids == [top[0].token_id]  # the greedy token is the most likely one
            self._candidates[key] = [(t.token_id, t.logprob) for t in top]
        return self._candidates[key]

    def beam_search(self, prompt, width, max_tokens, ignore_eos=False, stop_token_ids=(),
                    length_penalty=1.0):
        """The best `width` hypotheses, best first: [(token ids, cumulative, ended)]."""
        # The engine holds length_penalty as a float32, and raises the length to it in double.
        penalty = float(np.float32(length_penalty))
        ending = set(stop_token_ids) | (set() if ignore_eos else self.end_of_generation_ids)

        def score(tokens, cumulative, ended):
            length = len(prompt) + len(tokens) - (1 if ended else 0)
            return cumulative / float(length) ** penalty

        max_output = min(max_tokens, self.max_model_len - len(prompt))
        beams = [([], 0.0)]
        finished = []
        for step in range(max_output):
            candidates = []
            for output, cumulative in beams:
                for token, logprob in self.candidates(prompt + output, 2 * width):
                    c = cumulative + logprob
                    if token in ending:
                        finished.append((output + [token], c, True))
                    else:
                        candidates.append((output + [token], c, False))
            ranked = sorted(candidates, key=lambda h: score(*h), reverse=True)[:width]
            if step + 1 == max_output or not ranked:
                return sorted(finished + ranked, key=lambda h: score(*h), reverse=True)[:width]
            beams = [(output, c) for output, c, _ in ranked]
        raise AssertionError("max_tokens must be positive")


def served_hypotheses(stub, prompt, width, max_tokens, ignore_eos=False, stop_token_ids=(),
                      length_penalty=None):
    """One beam_search request: [(token ids, cumulative_logprob, ended)], index 0 first."""
    beam = pb2.BeamSearch() if length_penalty is None else pb2.BeamSearch(
        length_penalty=length_penalty)
    _, _, responses = generate(stub, pb2.GenerateRequest(
        token_ids=pb2.TokenIds(ids=prompt), max_tokens=max_tokens, n=width, beam_search=beam,
        ignore_eos=ignore_eos, stop_token_ids=list(stop_token_ids)))
    tokens = {i: [] for i in range(width)}
    final = {}
    for r in responses:
        tokens[r.index].extend(r.token_ids)
        if r.finish_reason != pb2.FINISH_REASON_UNSPECIFIED:
            assert r.index not in final, "one final response per hypothesis"
            final[r.index] = r
    assert sorted(final) == list(range(width))
    out = []
    for i in range(width):
        r = final[i]
        assert r.finish_reason in (pb2.FINISH_REASON_STOP, pb2.FINISH_REASON_LENGTH), r
        assert r.HasField("cumulative_logprob"), r
        assert r.usage.completion_tokens == len(tokens[i])
        out.append((tokens[i], r.cumulative_logprob, r.finish_reason == pb2.FINISH_REASON_STOP))
    return out


def check(server, reference, prompt, width, max_tokens, **kwargs):
    expected = reference.beam_search(prompt, width, max_tokens, **kwargs)
    served = served_hypotheses(server.stub, prompt, width, max_tokens, **kwargs)
    # Exactly: the same tokens in the same order, the same float64 sums, the same endings.
    assert served == expected, (
        f"width {width}, {kwargs}:\n served   {served}\n expected {expected}")
    ending = set(kwargs.get("stop_token_ids", ())) | (
        set() if kwargs.get("ignore_eos") else reference.end_of_generation_ids)
    for tokens, _, ended in served:
        # STOP: the last token ends the output; LENGTH: max_tokens of them.
        assert (tokens[-1] in ending) if ended else (len(tokens) == max_tokens), served
        assert not ending & set(tokens[:-1]), served
    return served


def tokenize(server, **input_):
    return list(server.stub.Tokenize(pb2.TokenizeRequest(**input_)).token_ids)


def greedy(server, prompt, max_tokens, ignore_eos):
    ids, _, _ = generate(server.stub, pb2.GenerateRequest(
        token_ids=pb2.TokenIds(ids=prompt), max_tokens=max_tokens, ignore_eos=ignore_eos,
        sampling=pb2.SamplingParams(temperature=0)))
    return ids


STORIES = ["Once upon a time, there was", "Lily and Tom went to the park.",
             "The little dog was very"]
# stories260K's "." token: as a stop id it ends hypotheses at several lengths (its EOS is never
# among a step's 16 most likely tokens on these prompts), where the length penalty matters.
FULL_STOP = 426


def chat(content):
    return pb2.Chat(messages=[pb2.ChatMessage(role="user", content=content)])


# SmolLM2 and Qwen answer this one in a few tokens and <|im_end|>: hypotheses end at EOS.
YES_NO = chat("Say yes or no: is water wet?")
OPEN = chat("Name a color you like and say why.")


@pytest.fixture(scope="module")
def tiny():
    with Server(model=TINY_MODEL, log_level="info") as s:
        yield s, Reference(s)


@pytest.mark.parametrize("ignore_eos", [True, False], ids=["ignore_eos", "eos"])
@pytest.mark.parametrize("text", STORIES)
def test_tiny_model_widths_1_to_8(tiny, text, ignore_eos):
    server, reference = tiny
    prompt = tokenize(server, text=text)
    results = [check(server, reference, prompt, width, 8, ignore_eos=ignore_eos)
               for width in range(1, 9)]
    # Width 1 is greedy decoding. (Where EOS is honoured, an end-of-generation token among a
    # step's two candidates would be a finished hypothesis of its own, which may outscore the
    # greedy continuation under the length normalization.)
    if ignore_eos:
        assert results[0][0][0] == greedy(server, prompt, 8, ignore_eos=True)
    for width, hypotheses in enumerate(results, start=1):
        assert len(hypotheses) == width
        assert len({tuple(t) for t, _, _ in hypotheses}) == width, hypotheses


@pytest.mark.parametrize("length_penalty", [1.0, 0.5, 2.0])
def test_tiny_model_stop_id_and_length_penalty(tiny, length_penalty):
    server, reference = tiny
    assert server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=[FULL_STOP])).text == "."
    ended = reranked = 0
    for text in STORIES:
        prompt = tokenize(server, text=text)
        for width in range(1, 9):
            hypotheses = check(server, reference, prompt, width, 16, stop_token_ids=[FULL_STOP],
                               length_penalty=length_penalty)
            ended += sum(e for _, _, e in hypotheses)
            unpenalized = reference.beam_search(prompt, width, 16, stop_token_ids=[FULL_STOP])
            reranked += [t for t, _, _ in hypotheses] != [t for t, _, _ in unpenalized]
    # Not vacuous: hypotheses end at the stop id, and the penalty changes the results.
    assert ended >= 10, ended
    assert (reranked > 0) == (length_penalty != 1.0), reranked


@pytest.fixture(scope="module")
def smol():
    with Server(model=DEFAULT_MODEL, log_level="info") as s:
        yield s, Reference(s)


@pytest.mark.parametrize("ignore_eos", [True, False], ids=["ignore_eos", "eos"])
@pytest.mark.parametrize("messages", [OPEN, YES_NO], ids=["open", "yes_no"])
def test_smollm2_chat_widths(smol, messages, ignore_eos):
    server, reference = smol
    prompt = tokenize(server, chat=messages)
    results = {width: check(server, reference, prompt, width, 6, ignore_eos=ignore_eos)
               for width in (1, 2, 4, 8)}
    if ignore_eos:
        assert results[1][0][0] == greedy(server, prompt, 6, ignore_eos=True)
    assert all(len(h) == w for w, h in results.items())
    if messages is YES_NO and not ignore_eos:
        assert sum(e for _, _, e in results[8]) >= 2, results[8]


@pytest.mark.parametrize("length_penalty", [0.5, 2.0])
def test_smollm2_length_penalty(smol, length_penalty):
    server, reference = smol
    prompt = tokenize(server, chat=YES_NO)
    for width in (2, 4, 8):
        check(server, reference, prompt, width, 6, length_penalty=length_penalty)


@pytest.mark.skipif(not SERVE_MODEL.exists(),
                    reason=f"{SERVE_MODEL} is absent: scripts/setup fetches it")
def test_default_model_chat_widths():
    with Server(model=SERVE_MODEL, log_level="info") as server:
        reference = Reference(server)
        prompt = tokenize(server, chat=YES_NO)
        for width in (1, 2, 4):
            hypotheses = check(server, reference, prompt, width, 4, ignore_eos=True)
            if width == 1:
                assert hypotheses[0][0] == greedy(server, prompt, 4, ignore_eos=True)
        for width in (2, 4):
            check(server, reference, prompt, width, 4)
