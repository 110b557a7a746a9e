"""Single-stream CPU benchmark: tokenmill vs llama.cpp (llama-cpp-python) on the same GGUF.

Prefill tokens/s for a 512-token prompt and decode tokens/s over 128 greedy tokens, both
engines with the same thread count, in interleaved runs; reports medians and the median of
the per-run ratios, and decode as a fraction of the memory-bandwidth ceiling (bytes of
weights read per token / measured read bandwidth).

  .venv/bin/python bench/single_stream.py --build build --runs 5 --threads 2
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np
import llama_cpp
from gguf import GGUFReader
from llama_cpp import Llama

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes "
        "Gutenberg combined movable metal type, oil-based inks and a wooden screw press. ")


def prompt_tokens(llm, n):
    """n token ids of a long English text, tokenized by llama.cpp (both engines get ids)."""
    ids = llm.tokenize((TEXT * 64).encode(), add_bos=True, special=False)
    assert len(ids) >= n
    return ids[:n]


def run_tokenmill(binary, model, ids, decode, threads):
    out = subprocess.run(
        [binary, "generate", "--model", model, "--prompt-tokens", ",".join(map(str, ids)),
         "--max-tokens", str(decode + 1), "--ignore-eos", "--temperature", "0",
         "--threads", str(threads), "--json", "--stats"],
        check=True, capture_output=True, text=True)
    stats = json.loads(out.stdout)["stats"]
    return len(ids) / stats["prefill_seconds"], stats["decode_steps"] / stats["decode_seconds"]


def last_logits(llm):
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1),
                                 shape=(llm.n_vocab(),))


def run_llama_cpp(llm, ids, decode):
    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    prefill = time.perf_counter() - start
    token = int(np.argmax(last_logits(llm)))
    decode_seconds = 0.0
    for _ in range(decode):
        start = time.perf_counter()
        llm.eval([token])
        decode_seconds += time.perf_counter() - start
        token = int(np.argmax(last_logits(llm)))
    return len(ids) / prefill, decode / decode_seconds


def weight_bytes_per_token(model):
    """Bytes of weights one decode step reads: every matrix once, plus the output matrix
    (token_embd again when tied), but only one row of the embedding table."""
    reader = GGUFReader(model)
    tensors = {t.name: int(t.n_bytes) for t in reader.tensors}
    total = sum(b for name, b in tensors.items() if name != "token_embd.weight")
    if "output.weight" not in tensors:
        total += tensors["token_embd.weight"]
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--decode", type=int, default=128)
    args = parser.parse_args()
    binary = os.path.join(args.build, "bin", "tokenmill")
    llm = Llama(model_path=args.model, n_ctx=args.prompt + args.decode + 16, n_batch=args.prompt,
                n_ubatch=args.prompt, n_threads=args.threads, n_threads_batch=args.threads,
                verbose=False)
    ids = prompt_tokens(llm, args.prompt)
    rows = []
    for run in range(args.runs):
        ours = run_tokenmill(binary, args.model, ids, args.decode, args.threads)
        theirs = run_llama_cpp(llm, ids, args.decode)
        rows.append((ours, theirs))
        print(f"run {run}: tokenmill prefill {ours[0]:.1f} decode {ours[1]:.1f} | "
              f"llama.cpp prefill {theirs[0]:.1f} decode {theirs[1]:.1f} tokens/s", flush=True)
    med = statistics.median
    bw = json.loads(subprocess.run(
        [os.path.join(args.build, "bin", "tokenmill_memory_bandwidth"), str(args.threads)],
        check=True, capture_output=True, text=True).stdout)["gb_per_s"]
    per_token = weight_bytes_per_token(args.model)
    ceiling = bw * 1e9 / per_token
    result = {
        "llama_cpp_python": llama_cpp.__version__,
        "threads": args.threads, "runs": args.runs,
        "prefill_tokens": args.prompt, "decode_tokens": args.decode,
        "tokenmill_prefill": med(r[0][0] for r in rows),
        "llama_cpp_prefill": med(r[1][0] for r in rows),
        "prefill_ratio_median": med(r[0][0] / r[1][0] for r in rows),
        "tokenmill_decode": med(r[0][1] for r in rows),
        "llama_cpp_decode": med(r[1][1] for r in rows),
        "decode_ratio_median": med(r[0][1] / r[1][1] for r in rows),
        "weight_bytes_per_token": per_token,
        "read_bandwidth_gb_per_s": bw,
        "decode_ceiling_tokens_per_s": ceiling,
    }
    result["tokenmill_decode_fraction_of_ceiling"] = result["tokenmill_decode"] / ceiling
    result["llama_cpp_decode_fraction_of_ceiling"] = result["llama_cpp_decode"] / ceiling
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
