"""Where a second llama.cpp build leaves the greedy goldens llama.cpp A (the AVX2 build in .venv)
wrote, and A's top-2 gap there: what tokenmill's near-tie tests bound, measured on llama.cpp
itself (tests/model/forward/gemma3_golden_test.cc, tests/e2e/test_gemma3_chat.py).

Each golden's prompt and then A's continuation are fed one token a step, as the goldens were
made; at the first step whose greedy token differs from A's, prints the step and A's gap there
(a continuation golden: A's best logit less its logit for the other token; a chat golden: A's
top-2 gap). The build is chosen as fidelity.py's llama.cpp B (docs/fidelity.md):

  LLAMA_CPP_LIB_PATH=/path/to/build-avx512/bin .venv/bin/python \\
      tests/reference/llama_cpp_departures.py models/gemma-3-270m-q4_k_m.gguf \\
      tests/data/logits/gemma-3-270m-q4_k_m.json tests/data/logits/gemma-3-270m-q4_k_m.chat.json

(not a test: it needs a second llama.cpp build.)
"""
import json
import sys

import numpy as np
from llama_cpp import Llama


def first_departure(llm, prompt, continuation):
    """(step, the build's token) where its greedy choice first differs, or None."""
    llm.reset()
    for token in prompt[:-1]:  # one a step: a batch would take llama.cpp's GEMM paths
        llm.eval([token])
    for i, token in enumerate([prompt[-1]] + list(continuation[:-1])):
        llm.eval([token])
        chosen = int(np.asarray(llm.scores[llm.n_tokens - 1]).argmax())
        if chosen != continuation[i]:
            return i, chosen
    return None


def continuation_gap(prompt, step, chosen):
    top = prompt["llama_cpp_top"][len(prompt["prompt_tokens"]) - 1 + step]
    logits = dict(zip(top["ids"], top["values"]))
    return top["values"][0] - logits[chosen] if chosen in logits else float("inf")


def main():
    model, goldens = sys.argv[1], sys.argv[2:]
    llm = Llama(model_path=model, n_ctx=2048, n_batch=512, n_threads=2, logits_all=True,
                verbose=False)
    for path in goldens:
        golden = json.load(open(path))
        if "chats" in golden:
            cases = [(c["prompt_tokens"], c["reply_tokens"],
                      lambda step, _, c=c: c["top2_gaps"][step]) for c in golden["chats"]]
        else:
            cases = [(p["prompt_tokens"], p["continuation"],
                      lambda step, chosen, p=p: continuation_gap(p, step, chosen))
                     for p in golden["prompts"]]
        departures = []
        for prompt, continuation, gap in cases:
            found = first_departure(llm, prompt, continuation)
            if found:
                departures.append((found[0], round(gap(*found), 3)))
        print(f"{path}: {len(cases) - len(departures)} of {len(cases)} equal; departures "
              f"(step, A's gap): {departures}")


if __name__ == "__main__":
    main()
