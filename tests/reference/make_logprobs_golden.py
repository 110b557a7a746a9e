"""Writes tests/data/logprobs/<model>.json: llama.cpp's greedy continuation of a few prompts
and, at each of its steps, the log-softmax (in float64, over the whole vocabulary) of the
TOP most likely ids. tests/e2e/test_server_sampling.py compares the server's logprobs with it.

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_logprobs_golden.py
"""
import json
import os

import numpy as np
from llama_cpp import Llama

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.environ.get("TOKENMILL_MODELS_DIR", os.path.join(ROOT, "models"))
OUT_DIR = os.path.join(ROOT, "tests", "data", "logprobs")
STEPS = 8
TOP = 64

PROMPTS = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": [
        "Write a short poem about the sea and the wind, the ships and the sailors who",
        "The capital of France is",
    ],
    "stories260K.gguf": [
        "Once upon a time, there was",
        "Lily and Tom went to the park.",
    ],
}


def log_softmax(row):
    row = np.asarray(row, dtype=np.float64)
    top = row.max()
    return row - (top + np.log(np.exp(row - top).sum()))


def greedy_steps(llm, prompt_ids):
    llm.reset()
    llm.eval(prompt_ids)
    steps = []
    for _ in range(STEPS):
        logprobs = log_softmax(llm.scores[llm.n_tokens - 1])
        order = np.argsort(-logprobs, kind="stable")[:TOP]
        steps.append({"token": int(order[0]),
                      "top": [[int(i), round(float(logprobs[i]), 6)] for i in order]})
        llm.eval([int(order[0])])
    return steps


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, prompts in PROMPTS.items():
        # Fed one token at a time, as make_logits_golden.py does: every op then takes ggml's
        # one-token path, whose numerics tokenmill follows (the batched prompt takes sgemm).
        llm = Llama(model_path=os.path.join(MODELS, name), n_ctx=256, n_threads=1, n_batch=1,
                    n_ubatch=1, logits_all=True, verbose=False, seed=0)
        cases = []
        for prompt in prompts:
            ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
            cases.append({"prompt": prompt, "prompt_ids": ids, "steps": greedy_steps(llm, ids)})
        out = os.path.join(OUT_DIR, os.path.splitext(name)[0] + ".json")
        with open(out, "w") as f:
            json.dump({"model": name, "top": TOP, "cases": cases}, f, indent=1)
        print("wrote", out)


if __name__ == "__main__":
    main()
