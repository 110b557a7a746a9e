"""Writes tests/data/logits/gemma-3-270m-q4_k_m.json: for each of make_logits_golden.py's 12
prompts, llama.cpp's token ids, its top logits at every position of prompt + greedy
continuation (48 tokens, stopping at end-of-sequence) and that continuation, llama.cpp fed one
token at a time through its vec_dot path (make_requantized_golden.py says how and why), for the
real Gemma 3 270M Q4_K_M (models/, fetched by scripts/setup).

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_gemma3_golden.py
"""
import json
import os
import sys

import llama_cpp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_logits_golden import MODELS, PROMPTS  # noqa: E402
from make_requantized_golden import golden_for_file  # noqa: E402
from requantize import sha256, tensor_types  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = "gemma-3-270m-q4_k_m.gguf"


def main():
    path = os.path.join(MODELS, MODEL)
    golden = {
        "model": MODEL,
        "sha256": sha256(path),
        "tensor_types": tensor_types(path),
        "llama_cpp_python_version": llama_cpp.__version__,
        "llama_cpp_run": "n_threads=1, n_batch=n_ubatch=1 (prompt fed token by token), "
                         "flash attention off, f16 KV cache, GGML_CPU_REPACK=OFF, "
                         "use_extra_bufts=false",
        "note": "llama_cpp_top[i] are the logits after token i of prompt + continuation",
        "prompts": golden_for_file(path, n_prompts=len(PROMPTS), continuation_tokens=48),
    }
    out = os.path.join(ROOT, "tests", "data", "logits", os.path.splitext(MODEL)[0] + ".json")
    with open(out, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    print("wrote", out, golden["tensor_types"], flush=True)


if __name__ == "__main__":
    main()
