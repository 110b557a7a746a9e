"""Writes tests/data/logits/requantized/SmolLM2-135M-Instruct.<TARGET>.json for each file that
requantize.py makes: the tensor types the file really holds, and for each prompt llama.cpp's
token ids, its top logits at every position of prompt + greedy continuation, and that
continuation, with llama.cpp fed one token at a time (make_logits_golden.py says why).

llama.cpp's CPU reference is its `vec_dot` path: llama-cpp-python built with
-DGGML_CPU_REPACK=OFF (scripts/setup; docs/weight-types.md), so that no matrix is repacked into
the interleaved tiles x86 ggml uses by default for Q4_0, Q4_K and IQ4_NL; and the model is loaded
without extra buffer types (llama_model_params.use_extra_bufts = false), which keeps a build that
can repack from doing so.

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_requantized_golden.py [TARGET...]
"""
import json
import os
import sys

import llama_cpp
import llama_cpp.llama_cpp as llama_cpp_api
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_logits_golden import PROMPTS, greedy_token_by_token  # noqa: E402
from requantize import DEFAULT_OUT, TARGETS, requantize, sha256, tensor_types  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(ROOT, "tests", "data", "logits", "requantized")
N_PROMPTS = 8
CONTINUATION = 48


def without_extra_buffer_types(default_params):
    def params():
        p = default_params()
        p.use_extra_bufts = False  # no CPU_REPACK buffer: every matmul through vec_dot
        return p
    return params


# Llama() takes its model parameters from here and has no argument for this one.
llama_cpp_api.llama_model_default_params = without_extra_buffer_types(
    llama_cpp_api.llama_model_default_params)


def golden_for_file(path, n_prompts=N_PROMPTS, continuation_tokens=CONTINUATION):
    llm = Llama(model_path=path, n_ctx=512, n_threads=1, n_batch=1, n_ubatch=1, logits_all=True,
                verbose=False, seed=0)
    prompts = []
    for text in PROMPTS[:n_prompts]:
        prompt, continuation, llama_cpp_top = greedy_token_by_token(llm, text,
                                                                    continuation_tokens)
        prompts.append({
            "text": text,
            "prompt_tokens": [int(t) for t in prompt],
            "continuation": continuation,
            "llama_cpp_top": llama_cpp_top,
        })
    return prompts


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for target in sys.argv[1:] or list(TARGETS):
        path = requantize(target, DEFAULT_OUT)
        golden = {
            "model": os.path.basename(path),
            "made_by": f"llama_cpp.llama_model_quantize(ftype {target}, allow_requantize) "
                       "from SmolLM2-135M-Instruct.Q4_1.gguf (tests/reference/requantize.py)",
            "sha256": sha256(path),
            "tensor_types": tensor_types(path),
            "llama_cpp_python_version": llama_cpp.__version__,
            "llama_cpp_run": "n_threads=1, n_batch=n_ubatch=1 (prompt fed token by token), "
                             "flash attention off, f16 KV cache, GGML_CPU_REPACK=OFF, "
                             "use_extra_bufts=false",
            "note": "llama_cpp_top[i] are the logits after token i of prompt + continuation",
            "prompts": golden_for_file(path),
        }
        out = os.path.join(OUT_DIR, os.path.splitext(os.path.basename(path))[0] + ".json")
        with open(out, "w") as f:
            json.dump(golden, f, separators=(",", ":"))
        print("wrote", out, golden["tensor_types"], flush=True)


if __name__ == "__main__":
    main()
