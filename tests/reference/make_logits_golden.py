"""Writes tests/data/logits/<model>.json: for each prompt, llama.cpp's token ids, its top
logits at every position of prompt + greedy continuation, that continuation (up to 64
tokens, stopping at end-of-sequence), and the NumPy reference's logits (numpy_forward.py)
at every prompt position for a fixed sample of vocabulary ids plus its top ids.

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_logits_golden.py
"""
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_forward import NumpyModel  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.environ.get("TOKENMILL_MODELS_DIR", os.path.join(ROOT, "models"))
OUT_DIR = os.path.join(ROOT, "tests", "data", "logits")
CONTINUATION = 64
TOP_K = 5          # llama.cpp's top logits kept per position
SAMPLE_IDS = 128   # vocabulary ids whose NumPy logits are kept at every prompt position
NUMPY_TOP = 8

PROMPTS = [
    "Once upon a time, there was a little girl named Lily.",
    "The capital of France is",
    "Tom and his dog went to the park. They",
    "def fibonacci(n):",
    "Water boils at a temperature of",
    "One day, a big bear found a red ball in the forest.",
    "The three primary colors are",
    "Sam was sad because his toy was broken. His mom said",
    "In 1969, the first humans",
    "The cat sat on the mat and",
    "Photosynthesis is the process by which plants",
    "Once there was a tiny bird who wanted to fly high.",
]

MODEL_FILES = ["SmolLM2-135M-Instruct.Q4_1.gguf", "stories260K.gguf"]


def rounded(values):
    return [round(float(v), 5) for v in values]


def llama_cpp_self_agreement(path, prompts):
    """How many of the golden (token-by-token) continuations llama.cpp reproduces when run
    its default way (2 threads, the prompt in one batch): a measure of how full of near-ties
    the model's greedy text is, since only the batch shape differs."""
    llm = Llama(model_path=path, n_ctx=512, n_threads=2, logits_all=True, verbose=False, seed=0)
    same = 0
    for p in prompts:
        llm.reset()
        llm.eval(p["prompt_tokens"])
        out = []
        while len(out) < len(p["continuation"]):
            out.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            if out[-1] != p["continuation"][len(out) - 1]:
                break
            llm.eval([out[-1]])
        same += out == p["continuation"]
    return same



def greedy_token_by_token(llm, text, max_tokens):
    """llama.cpp fed one token at a time: the prompt's token ids, the greedy continuation (up to
    max_tokens, stopping at end-of-sequence) and llama.cpp's top TOP_K logits at every position."""
    eos = llm.token_eos()
    llm.reset()
    prompt = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    for token in prompt:
        llm.eval([token])
    continuation = []
    while len(continuation) < max_tokens:
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if token == eos:
            break
        continuation.append(token)
        llm.eval([token])
    scores = np.array(llm.scores[: llm.n_tokens], dtype=np.float32)
    top = np.argsort(-scores, axis=-1, kind="stable")[:, :TOP_K]
    return prompt, continuation, [{"ids": top[i].tolist(), "values": rounded(scores[i, top[i]])}
                                  for i in range(len(scores))]

def golden_for_model(model_file):
    path = os.path.join(MODELS, model_file)
    # The prompt is fed one token at a time (n_batch = n_ubatch = 1). llama.cpp's CPU numerics
    # depend on the batch shape: a batch of several tokens goes through llamafile's sgemm
    # (other summation orders for the Q8_0 output matrix, F32 weights and the f16 K·Q products)
    # while one token takes ggml's vec_dot kernels. tokenmill computes every token the same way
    # whatever its batch (its determinism rule), so the run it can match bit for bit is the one
    # where every token, prompt and generated alike, takes the one-token path. It is llama.cpp's
    # ordinary decode path; the batched run's agreement with it is recorded below.
    llm = Llama(model_path=path, n_ctx=512, n_threads=1, n_batch=1, n_ubatch=1, logits_all=True,
                verbose=False, seed=0)
    reference = NumpyModel(path)
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(1234)
    sample_ids = sorted(rng.choice(n_vocab, size=min(SAMPLE_IDS, n_vocab), replace=False).tolist())
    prompts = []
    for text in PROMPTS:
        prompt, continuation, llama_cpp_top = greedy_token_by_token(llm, text, CONTINUATION)
        numpy_logits = reference.forward(prompt)
        numpy_rows = []
        for row in numpy_logits:
            top_ids = np.argsort(-row, kind="stable")[:NUMPY_TOP].tolist()
            ids = sorted(set(sample_ids) | set(top_ids))
            numpy_rows.append({"ids": ids, "values": rounded(row[ids])})
        prompts.append({
            "text": text,
            "prompt_tokens": [int(t) for t in prompt],
            "continuation": continuation,
            "llama_cpp_top": llama_cpp_top,
            "numpy_logits": numpy_rows,
        })
        print(model_file, repr(text), len(prompt), "prompt tokens,", len(continuation),
              "generated", flush=True)
    self_agreement = llama_cpp_self_agreement(path, prompts)
    print(model_file, "llama.cpp's batched run reproduces", self_agreement, "of", len(prompts),
          "of the token-by-token continuations", flush=True)
    return {
        "model": model_file,
        "llama_cpp_python_version": llama_cpp.__version__,
        "llama_cpp_self_agreement": {
            "identical_continuations": self_agreement,
            "of": len(prompts),
            "how": "n_threads=2, prompt in one batch, vs the golden run "
                   "(n_threads=1, n_batch=n_ubatch=1: every token fed alone)",
        },
        "llama_cpp_run": "n_threads=1, n_batch=n_ubatch=1 (prompt fed token by token), "
                         "flash attention off, f16 KV cache",
        "note": "llama_cpp_top[i] are the logits after token i of prompt + continuation",
        "prompts": prompts,
    }


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for model_file in MODEL_FILES:
        golden = golden_for_model(model_file)
        out = os.path.join(OUT_DIR, os.path.splitext(model_file)[0] + ".json")
        with open(out, "w") as f:
            json.dump(golden, f, separators=(",", ":"))
        print("wrote", out)


if __name__ == "__main__":
    main()
