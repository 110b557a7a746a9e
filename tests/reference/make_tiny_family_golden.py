"""Writes tests/data/logits/tiny/<name>.json for each tiny random model of
tests/reference/tiny_families/: llama.cpp's logits after every token of each prompt and of its
greedy continuation, llama.cpp fed one token at a time (make_logits_golden.py says why), and the
sha256 of the GGUF it ran, which tests/model/forward/test_tiny_families.py writes again from the
same module (GGUFs are never committed) and checks before comparing.

To add a family or a variant: write tests/reference/tiny_families/<name>.py with
  ARCH = "<general.architecture>"
  def write(path): ...   # a TinyWriter (common.py) of that ARCH, closed
  PROMPTS = [...]        # optional: token-id prompts (default common.PROMPTS)
  N_CTX = ...            # optional: the context llama.cpp is given (n_ctx; default CONTEXT),
                         # and tokenmill (ModelOptions::context)
setting the metadata so that every variant it stands for acts within CONTEXT (256) tokens, then
run this script with its name and commit the golden; the test picks up every module.

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_tiny_family_golden.py [NAME...]
"""
import json
import os
import sys
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_families  # noqa: E402
from tiny_families.common import CONTEXT, CONTINUATION, PROMPTS, sha256  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(ROOT, "tests", "data", "logits", "tiny")


def greedy_token_by_token(llm, prompt, n):
    """The greedy continuation of `prompt` (n tokens) and llama.cpp's logits after each token of
    prompt + continuation, every token evaluated alone."""
    llm.reset()
    for token in prompt:
        llm.eval([token])
    continuation = []
    while len(continuation) < n:
        continuation.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([continuation[-1]])
    return continuation, np.array(llm.scores[: llm.n_tokens], dtype=np.float32)


def golden_for(name):
    module = tiny_families.family(name)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name + ".gguf")
        module.write(path)
        n_ctx = getattr(module, "N_CTX", CONTEXT)
        # YaRN's betas -1: "from the model", llama.cpp's own default (llama_context_default_params,
        # common.h), so that a file's rope.scaling.yarn_beta_* apply (mistral3) as in llama-cli
        # and llama-server; llama-cpp-python's own defaults (32, 1) would override them. A file
        # without them gets llama.cpp's 32 and 1 either way.
        llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=1, n_batch=1, n_ubatch=1,
                    logits_all=True, verbose=False, seed=0, yarn_beta_fast=-1.0,
                    yarn_beta_slow=-1.0)
        prompts = []
        for prompt in getattr(module, "PROMPTS", PROMPTS):
            continuation, logits = greedy_token_by_token(llm, prompt, CONTINUATION)
            top2 = np.sort(logits, axis=-1)[:, -2:]
            print(f"{name}: {len(prompt)} prompt tokens, logits std {logits.std():.2f}, "
                  f"smallest top-2 gap {float((top2[:, 1] - top2[:, 0]).min()):.4f}", flush=True)
            prompts.append({
                "prompt_tokens": prompt,
                "continuation": continuation,
                "logits": [[round(float(v), 5) for v in row] for row in logits],
            })
        return {
            "name": name,
            "arch": module.ARCH,
            "sha256": sha256(path),
            "llama_cpp_python_version": llama_cpp.__version__,
            "llama_cpp_run": "n_threads=1, n_batch=n_ubatch=1 (every token fed alone), "
                             f"n_ctx={n_ctx}, flash attention off, f16 KV cache, YaRN betas from the file",
            "note": "logits[i] are the logits after token i of prompt + continuation",
            "prompts": prompts,
        }


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name in sys.argv[1:] or tiny_families.FAMILIES:
        golden = golden_for(name)
        out = os.path.join(OUT_DIR, name + ".json")
        with open(out, "w") as f:
            json.dump(golden, f, separators=(",", ":"))
        print("wrote", out, flush=True)


if __name__ == "__main__":
    main()
