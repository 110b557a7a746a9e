"""Batched decode on the CPU: tokenmill vs llama.cpp (llama-cpp-python) on the same GGUF, at 1
and at 16 streams (issues 22 and 23).

Each engine decodes `--decode` greedy tokens after a `--prompt`-token prompt of random token
ids (no tokenizer on either side) for each stream count, the streams as one batch per step:
llama.cpp one llama_batch holding one token of each sequence per llama_decode, tokenmill its
engine with that many requests (bench/throughput: tokenmill_throughput). Runs alternate
between the engines `--runs` times; medians and the median of the per-run ratios are
printed, with the load average before and after.

  .venv/bin/python bench/decode/batched_decode.py --model models/gemma-3-270m-q4_k_m.gguf \
      --build build --threads 2 --runs 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def prompts(n_streams, n_prompt):
    rng = np.random.default_rng(3)
    return [[int(t) for t in rng.integers(3, 512, n_prompt)] for _ in range(n_streams)]


def llama_cpp_decode(path, n_streams, n_prompt, n_decode, threads, callback=None):
    """llama.cpp's decode tokens/s: every stream's prompt in one batch, then n_decode steps of
    one llama_batch holding one token of each stream. callback: an eval callback to see the
    graph's tensors (untimed runs only)."""
    llm = Llama(model_path=path, n_ctx=n_streams * (n_prompt + n_decode) + 64,
                n_batch=max(512, n_streams * n_prompt), n_threads=threads,
                n_threads_batch=threads, verbose=False)
    params = llm.context_params
    if callback is not None:
        params.cb_eval = callback
        params.cb_eval_user_data = None
    params.n_seq_max = n_streams
    params.n_ubatch = max(512, n_streams * n_prompt)
    params.n_batch = params.n_ubatch
    llm._ctx = llama_cpp._internals.LlamaContext(model=llm._model, params=params, verbose=False)
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()
    batch = llama_cpp.llama_batch_init(n_streams * n_prompt, 0, n_streams)

    def run(items):  # [(token, pos, seq, wants_logits)]
        batch.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        if llama_cpp.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")

    def greedy(i):
        row = llama_cpp.llama_get_logits_ith(ctx, i)
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(n_vocab,))))

    ps = prompts(n_streams, n_prompt)
    run([(t, pos, s, pos == n_prompt - 1) for s in range(n_streams)
         for pos, t in enumerate(ps[s])])
    nxt = [greedy(s * n_prompt + n_prompt - 1) for s in range(n_streams)]
    start = time.perf_counter()
    for step in range(n_decode):
        run([(nxt[s], n_prompt + step, s, True) for s in range(n_streams)])
        nxt = [greedy(s) for s in range(n_streams)]
    elapsed = time.perf_counter() - start
    llama_cpp.llama_batch_free(batch)
    return n_streams * n_decode / elapsed


def tokenmill_decode(build, path, n_streams, n_prompt, n_decode, threads):
    """tokenmill's decode tokens/s (tokenmill_throughput: n_streams requests at once)."""
    out = subprocess.run(
        [os.path.join(build, "bin", "tokenmill_throughput"), "--model", path,
         "--concurrency", str(n_streams), "--prompt-tokens", str(n_prompt),
         "--max-tokens", str(n_decode + 1), "--threads", str(threads), "--repeats", "1"],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[0])["decode_tokens_per_second"]


def compare(build, path, n_streams, runs, n_prompt, n_decode, threads):
    """Alternating runs of both engines at n_streams; prints each and returns the median of
    the per-run ratios tokenmill / llama.cpp."""
    ours, theirs = [], []
    for run in range(runs):
        theirs.append(llama_cpp_decode(path, n_streams, n_prompt, n_decode, threads))
        ours.append(tokenmill_decode(build, path, n_streams, n_prompt, n_decode, threads))
        print(f"  {n_streams} streams run {run}: tokenmill {ours[-1]:.1f} tok/s, "
              f"llama.cpp {theirs[-1]:.1f} tok/s", flush=True)
    ratio = statistics.median(o / t for o, t in zip(ours, theirs))
    print(f"{n_streams} streams: tokenmill {statistics.median(ours):.1f} tok/s, llama.cpp "
          f"{statistics.median(theirs):.1f} tok/s, median ratio {ratio:.2f}x", flush=True)
    return ratio


def arguments(description, model=True):
    ap = argparse.ArgumentParser(description=description)
    if model:
        ap.add_argument("--model", required=True)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--streams", default="1,16", help="comma-separated stream counts")
    return ap


def main():
    args = arguments(__doc__.split("\n")[0]).parse_args()
    print(f"model {args.model}: {os.path.getsize(args.model) / 2**20:.0f} MiB; {args.threads} "
          f"threads; load average {os.getloadavg()}", flush=True)
    for n_streams in map(int, args.streams.split(",")):
        compare(args.build, args.model, n_streams, args.runs, args.prompt, args.decode,
                args.threads)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
