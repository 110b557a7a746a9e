"""Requantizes the default model with llama.cpp's own quantizer (llama_cpp.llama_model_quantize,
allow_requantize: from its Q4_1 weights) into the weight types of issue 21, and lists the tensor
types each file it makes really holds: SmolLM2's 576-wide rows are no multiple of the K-quants'
256, so llama.cpp falls back to other types for most of its matrices.

scripts/setup runs it (the files are models, not committed); make_requantized_golden.py writes
the goldens from the same files.
  .venv/bin/python tests/reference/requantize.py [OUT_DIR]   (default: models/requantized)
"""
import collections
import hashlib
import os
import sys

import llama_cpp
from gguf import GGUFReader

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(ROOT, "models", "requantized")
# Name in the file name -> llama.cpp's ftype. On this model two mixes hold none of their own
# type: llama.cpp's Q2_K gives ffn_down Q3_K (the rest falls back to Q4_0), so Q2_K is made
# "pure" (every tensor Q2_K where its rows allow); Q3_K_M gives ffn_down Q4_K, so Q3_K_S (whose
# ffn_down is Q3_K) is made beside it. IQ4_NL_PURE (every tensor IQ4_NL, its output and
# embedding included) runs on the CPU without the K-quants that llama.cpp's IQ4_NL mix holds.
PURE = {"Q2_K", "IQ4_NL_PURE"}
TARGETS = {
    "Q2_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K,
    "Q3_K_S": llama_cpp.LLAMA_FTYPE_MOSTLY_Q3_K_S,
    "Q3_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q3_K_M,
    "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q5_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "Q6_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K,
    "Q5_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_0,
    "Q5_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_1,
    "IQ4_NL": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ4_NL,
    "IQ4_NL_PURE": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ4_NL,
    "IQ4_XS": llama_cpp.LLAMA_FTYPE_MOSTLY_IQ4_XS,
}


def file_name(target):
    return f"SmolLM2-135M-Instruct.{target}.gguf"


def requantize(target, out_dir):
    """The requantized file's path, made if missing (one thread: the same bytes anywhere);
    llama.cpp's log of it goes to <file>.log beside it."""
    path = os.path.join(out_dir, file_name(target))
    if os.path.exists(path):
        return path
    os.makedirs(out_dir, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = TARGETS[target]
    params.allow_requantize = True
    params.pure = target in PURE
    params.nthread = 1
    partial = path + ".partial"
    stderr = os.dup(2)
    with open(path + ".log", "w") as log:
        os.dup2(log.fileno(), 2)
        try:
            rc = llama_cpp.llama_model_quantize(SOURCE.encode(), partial.encode(), params)
        finally:
            os.dup2(stderr, 2)
            os.close(stderr)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize to {target} failed ({rc}): see {path}.log")
    os.replace(partial, path)
    return path


def tensor_types(path):
    """{ggml type name: number of tensors} of the file."""
    counts = collections.Counter(t.tensor_type.name.lower() for t in GGUFReader(path).tensors)
    return dict(sorted(counts.items()))


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    for target in TARGETS:
        made = not os.path.exists(os.path.join(out_dir, file_name(target)))
        path = requantize(target, out_dir)
        if made:  # reading every file's tensors again took 23 s of each setup run
            print(f"{os.path.basename(path)}: {tensor_types(path)}", flush=True)


if __name__ == "__main__":
    main()
