"""Writes tests/data/beam_search/<model>.json: vLLM's beam search (the one engine/beam_search.cc
implements) run in Python over llama.cpp's logits, EOS ignored and a fixed length, for a few
prompts and widths 1-8. Per case: the hypotheses (best first) with their cumulative
log-probabilities, and how close the search came to deciding otherwise:

- cut_gaps[t]: at step t, the cumulative log-probability of the width-th kept candidate minus
  that of the best dropped one (all candidates of a step have the same length, so this is the
  score gap times the common divisor, in nats; absent where nothing was dropped);
- margin: the smallest of them, the case's near-tie margin: logits that move a candidate's
  cumulative by less than half of it cannot change which hypotheses come out;
- order_margin: the smallest gap between consecutive final hypotheses (what their order rests
  on).

tests/e2e/test_beam_search_llama_cpp.py sends each case to tokenmill as a beam_search request.

The search: one empty beam; for max_tokens steps, each live beam in order gives its 2*width
most likely next tokens (ties: the lower id first) with their log-softmax (float64 over
llama.cpp's float32 logits); a candidate's cumulative is its beam's plus that; candidates are
ranked by cumulative / (prompt + output tokens) ** length_penalty, best first, equal scores
keeping their order (Python's stable sort, as vLLM's), and the best `width` become the beams.
With ignore_eos and no stop ids nothing ends early: the last step's beams are the result.

llama.cpp is fed one token at a time (n_batch 1), as make_logprobs_golden.py does: every op
then takes ggml's one-token path, whose numerics tokenmill follows. A beam's logits come from
the context rewound to the longest prefix it shares with the last evaluated sequence (eval
drops the KV cells past n_tokens, as reset() does at 0); each case re-evaluates its best
hypothesis from scratch and checks the logits are the same bit for bit.

Models: stories260K, SmolLM2 Q4_1 (the tests' default model) and SmolLM2 IQ4_NL_PURE (made by
requantize.py into models/requantized/, as scripts/setup does), whose logits in tokenmill are
llama.cpp's (docs/fidelity.md).

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_beam_search_golden.py
"""
import json
import os

import numpy as np
from llama_cpp import Llama

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.environ.get("TOKENMILL_MODELS_DIR", os.path.join(ROOT, "models"))
OUT_DIR = os.path.join(ROOT, "tests", "data", "beam_search")
WIDTHS = range(1, 9)
LENGTH_PENALTY = 1.0

SMOLLM2_PROMPTS = [
    "User: Name a color you like and say why.\nAssistant:",
    "The capital of France is",
    "Write a short poem about the sea and the wind, the ships and the sailors who",
]

MODELS_CASES = {
    "stories260K.gguf": {
        "max_tokens": 8,
        "prompts": [
            "Once upon a time, there was",
            "Lily and Tom went to the park.",
            "The little dog was very",
        ],
    },
    "SmolLM2-135M-Instruct.Q4_1.gguf": {
        "max_tokens": 6,
        "prompts": SMOLLM2_PROMPTS,
    },
    # The default model requantized by requantize.py (scripts/setup): every tensor IQ4_NL,
    # whose sums are ggml's, so tokenmill's logits are llama.cpp's (docs/fidelity.md).
    "requantized/SmolLM2-135M-Instruct.IQ4_NL_PURE.gguf": {
        "max_tokens": 6,
        "prompts": SMOLLM2_PROMPTS,
    },
}


def log_softmax(row):
    row = np.asarray(row, dtype=np.float64)
    top = row.max()
    return row - (top + np.log(np.exp(row - top).sum()))


class Logits:
    """llama.cpp's logits after a token sequence, fed one token at a time, reusing the KV of
    the longest prefix shared with the previous sequence."""

    def __init__(self, llm):
        self.llm = llm
        self.evaluated = []

    def after(self, tokens):
        llm = self.llm
        shared = 0
        for a, b in zip(self.evaluated, tokens):
            if a != b:
                break
            shared += 1
        # Keep at least the last token to evaluate: its row of scores is the one wanted.
        shared = min(shared, len(tokens) - 1)
        llm.n_tokens = shared
        llm.eval(tokens[shared:])
        self.evaluated = list(tokens)
        return np.array(llm.scores[len(tokens) - 1], dtype=np.float32)

    def fresh(self, tokens):
        self.llm.reset()
        self.evaluated = []
        return self.after(tokens)


def beam_search(logits, prompt_ids, width, max_tokens):
    beams = [([], 0.0)]  # (output tokens, cumulative logprob)
    cut_gaps = []
    for step in range(max_tokens):
        divisor = float(len(prompt_ids) + step + 1) ** LENGTH_PENALTY
        candidates = []
        for output, cumulative in beams:
            logprobs = log_softmax(logits.after(prompt_ids + output))
            order = np.argsort(-logprobs, kind="stable")[:2 * width]
            for token in order:
                c = cumulative + float(logprobs[token])
                candidates.append((output + [int(token)], c, c / divisor))
        ranked = sorted(candidates, key=lambda c: c[2], reverse=True)
        if len(ranked) > width:
            cut_gaps.append(ranked[width - 1][1] - ranked[width][1])
        beams = [(output, c) for output, c, _ in ranked[:width]]
    return beams, cut_gaps


def make_case(logits, prompt, prompt_ids, width, max_tokens):
    hypotheses, cut_gaps = beam_search(logits, prompt_ids, width, max_tokens)
    best = hypotheses[0][0]
    # The rewound context gives what a fresh one does (the best hypothesis's last step).
    again = logits.fresh(prompt_ids + best[:-1])
    assert np.array_equal(again, logits.after(prompt_ids + best[:-1])), "rewinding changed logits"
    cumulatives = [c for _, c in hypotheses]
    order_gaps = [a - b for a, b in zip(cumulatives, cumulatives[1:])]
    return {
        "prompt": prompt,
        "prompt_ids": prompt_ids,
        "width": width,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "length_penalty": LENGTH_PENALTY,
        "hypotheses": [{"token_ids": output, "cumulative_logprob": c} for output, c in hypotheses],
        "cut_gaps": cut_gaps,
        "margin": min(cut_gaps) if cut_gaps else None,
        "order_margin": min(order_gaps) if order_gaps else None,
    }


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, spec in MODELS_CASES.items():
        llm = Llama(model_path=os.path.join(MODELS, name), n_ctx=256, n_threads=1, n_batch=1,
                    n_ubatch=1, logits_all=True, verbose=False, seed=0)
        logits = Logits(llm)
        cases = []
        for prompt in spec["prompts"]:
            prompt_ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
            for width in WIDTHS:
                case = make_case(logits, prompt, prompt_ids, width, spec["max_tokens"])
                print(f"{name} width {width} margin {case['margin']:.3g} "
                      f"order margin {case['order_margin']}: {prompt!r}")
                cases.append(case)
        out = os.path.join(OUT_DIR, os.path.splitext(os.path.basename(name))[0] + ".json")
        with open(out, "w") as f:
            json.dump({"model": name, "cases": cases}, f, indent=1)
        print("wrote", out)


if __name__ == "__main__":
    main()
