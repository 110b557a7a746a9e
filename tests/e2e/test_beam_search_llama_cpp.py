"""Beam search over gRPC against vLLM's beam search run in Python over llama.cpp's logits
(tests/data/beam_search/, written by tests/reference/make_beam_search_golden.py: llama-cpp-python
fed one token at a time, EOS ignored, a fixed length, widths 1-8, length_penalty 1), except where
a cut between kept and dropped candidates is a near-tie that the distance between tokenmill's
logits and llama.cpp's may flip.

A near-tie, per model: each candidate's log-probability may be up to DELTA nats from llama.cpp's,
so after t + 1 tokens its cumulative may be up to (t + 1) * DELTA off, and the gap between a
kept and a dropped candidate up to twice that. A case is compared when every step's cut gap
(the width-th kept candidate's cumulative minus the best dropped one's, which the golden
records) exceeds 2 * (t + 1) * DELTA: then tokenmill's search keeps the same beams every step
and must return the golden's hypotheses, their cumulative log-probabilities within
max_tokens * DELTA, and in the golden's order unless two of them are within that of each other
(then as a set). Where its logits are llama.cpp's (stories260K, the IQ4_NL_PURE file) at least
2/3 of the cases must be compared; the others are counted and printed.

DELTA, from docs/fidelity.md and the logprobs tests (test_server_sampling.py):
- stories260K (F32): our log-probabilities are within 1e-5 nats of llama.cpp's (measured); 1e-4
  is the bound test_server_sampling.py holds them to. Here the hypotheses' cumulatives were
  within 1.2e-7 of the golden's.
- SmolLM2 IQ4_NL_PURE (every tensor IQ4_NL, models/requantized/ from scripts/setup): logits
  equal to llama.cpp's (docs/fidelity.md: KL 0, max |difference| 0), so only the log-softmax's
  float32 rounding remains; 1e-4 as above (measured: cumulatives within 1.6e-7).
- SmolLM2 Q4_1 (the tests' default model): its Q4_1 and Q8_0 matmuls sum in the row-group
  order, and through 30 layers of int8 activations the logits move: p99 |logit difference|
  0.81 against llama.cpp (docs/fidelity.md, outside issue 36's bound); the top log-probabilities
  are 0.39 nats from llama.cpp's at worst, here and in test_server_sampling.py, which holds
  them to 0.5. DELTA = 0.5. Every cut of these cases is finer than that (the largest margin is
  0.27 nats, at width 1), so none is compared: on this file the check is the count printed, and
  the exact checks are test_beam_search_reference.py (tokenmill's own logits) and the IQ4_NL_PURE
  file here (llama.cpp's logits).

On every model, a hypothesis both searches return (near-tie or not) must have its cumulative
within max_tokens * DELTA of the golden's: it sums the same positions' log-probabilities.
"""
import json
import os
from pathlib import Path

import pytest

from server_harness import DEFAULT_MODEL, MODELS_DIR, REPO, TINY_MODEL, Server, generate, pb2

DATA_DIR = Path(os.environ.get("TOKENMILL_TEST_DATA_DIR", REPO / "tests" / "data"))
PURE_MODEL = MODELS_DIR / "requantized" / "SmolLM2-135M-Instruct.IQ4_NL_PURE.gguf"

# (model, DELTA: nats a log-probability may be from llama.cpp's, the least fraction of the
# golden's cases compared).
MODELS = [
    pytest.param(TINY_MODEL, 1e-4, 2 / 3, id="stories260K"),
    pytest.param(PURE_MODEL, 1e-4, 2 / 3, id="SmolLM2-IQ4_NL_PURE", marks=pytest.mark.skipif(
        not PURE_MODEL.exists(), reason=f"{PURE_MODEL} is absent: scripts/setup makes it")),
    pytest.param(DEFAULT_MODEL, 0.5, 0.0, id="SmolLM2-Q4_1"),
]


def golden(model):
    with open(DATA_DIR / "beam_search" / (model.stem + ".json")) as f:
        data = json.load(f)
    assert data["model"].endswith(model.name)
    return data["cases"]


def served(stub, case):
    _, _, responses = generate(stub, pb2.GenerateRequest(
        token_ids=pb2.TokenIds(ids=case["prompt_ids"]), max_tokens=case["max_tokens"],
        n=case["width"], ignore_eos=case["ignore_eos"],
        beam_search=pb2.BeamSearch(length_penalty=case["length_penalty"])))
    tokens = {i: [] for i in range(case["width"])}
    final = {}
    for r in responses:
        tokens[r.index].extend(r.token_ids)
        if r.finish_reason != pb2.FINISH_REASON_UNSPECIFIED:
            final[r.index] = r
    assert sorted(final) == list(range(case["width"]))
    # EOS ignored, no stop ids: every hypothesis runs to max_tokens.
    assert all(final[i].finish_reason == pb2.FINISH_REASON_LENGTH for i in final)
    return [(tokens[i], final[i].cumulative_logprob) for i in range(case["width"])]


def comparable(case, delta):
    return all(gap > 2 * (step + 1) * delta for step, gap in enumerate(case["cut_gaps"]))


@pytest.mark.parametrize("model,delta,min_compared", MODELS)
def test_beam_search_agrees_with_llama_cpp(model, delta, min_compared):
    cases = golden(model)
    assert {c["width"] for c in cases} == set(range(1, 9))
    compared = []
    skipped = []
    with Server(model=model, log_level="info") as server:
        for case in cases:
            ours = served(server.stub, case)
            label = f"width {case['width']} {case['prompt']!r}"
            expected = [(h["token_ids"], h["cumulative_logprob"]) for h in case["hypotheses"]]
            tolerance = case["max_tokens"] * delta
            # A hypothesis both searches found has its cumulative from the same positions'
            # logits, whatever the cuts were.
            theirs = {tuple(t): c for t, c in expected}
            for tokens, c in ours:
                if tuple(tokens) in theirs:
                    assert abs(c - theirs[tuple(tokens)]) <= tolerance, (
                        f"{label}: {tokens} cumulative {c} against {theirs[tuple(tokens)]}")
            if not comparable(case, delta):
                same = [t for t, _ in ours] == [t for t, _ in expected]
                skipped.append(f"{label}: margin {case['margin']:.3g} nats, "
                               f"{'the same hypotheses' if same else 'other hypotheses'}")
                continue
            if case["order_margin"] is not None and case["order_margin"] <= 2 * tolerance:
                ours, expected = sorted(ours), sorted(expected)
            assert [t for t, _ in ours] == [t for t, _ in expected], (
                f"{label}: ours {ours}\n llama.cpp's {expected}")
            for (_, a), (_, b) in zip(ours, expected):
                assert abs(a - b) <= tolerance, f"{label}: cumulative {a} against {b}"
            compared.append(label)
    print(f"\n{model.name}: {len(compared)} of {len(cases)} cases compared; near-ties skipped:")
    for line in skipped:
        print("  ", line)
    assert len(compared) >= min_compared * len(cases), (
        f"only {len(compared)} of {len(cases)} cases compared")
