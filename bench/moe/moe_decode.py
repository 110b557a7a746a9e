"""Mixture-of-experts decode on the CPU: tokenmill vs llama.cpp (llama-cpp-python) on the
same generated qwen3moe GGUF, larger than the last-level cache (issue 23).

The model: 12 layers of hidden 512 (8 heads of 64, 2 KV heads), 64 experts of 512 each, top-8,
random weights (so routing spreads over the experts) and stories260K's vocabulary of 512
(both engines tokenize nothing: they get token ids). Written as Q8_0 by the gguf package, then
requantized by llama.cpp's own quantizer to Q4_K_M (experts' gate/up Q4_K, down Q4_K/Q6_K).

Each engine decodes `--decode` greedy tokens after a `--prompt`-token prompt for 1 and for 16
streams, the 16 as one batch per step: llama.cpp one llama_batch of 16 sequences per
llama_decode, tokenmill its engine with 16 requests (bench/throughput: tokenmill_throughput).
Runs alternate between the engines `--runs` times; medians and the median of the per-run
ratios are printed, with the load average before and after.

  .venv/bin/python bench/moe/moe_decode.py --build build --threads 2 --runs 3
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import llama_cpp
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from llama_cpp import Llama

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from llama_cpp_dump import GgmlTensor  # noqa: E402
from tiny_families.common import TinyWriter  # noqa: E402

N_LAYER, N_EMBD, N_HEAD, N_KV, HEAD_DIM = 12, 512, 8, 2, 64
N_EXPERT, N_USED, N_FF_EXP = 64, 8, 512
VOCAB_SOURCE = os.path.join(ROOT, "models", "stories260K.gguf")


def write_q8_0(path):
    w = TinyWriter(path, "qwen3moe", seed=5, matrix_type=T.Q8_0, vocabulary_from=VOCAB_SOURCE)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF_EXP * N_USED, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, HEAD_DIM)
        w.head_norms(p, HEAD_DIM)
        w.attention_output(p, N_EMBD, N_HEAD * HEAD_DIM)
        w.experts(p, N_EMBD, N_FF_EXP, N_EXPERT)
    w.close()


def model_path(out_dir):
    """The Q4_K_M model, written once into out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    final = os.path.join(out_dir, "qwen3moe-64x512-top8-Q4_K_M.gguf")
    if os.path.exists(final):
        return final
    source = os.path.join(out_dir, "qwen3moe-64x512-top8-Q8_0.gguf")
    write_q8_0(source)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.allow_requantize = True
    params.nthread = 2
    if llama_cpp.llama_model_quantize(source.encode(), final.encode(), ctypes.byref(params)):
        sys.exit("llama_model_quantize failed")
    return final


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


def bytes_per_step(path, n_streams, n_prompt, n_decode, threads):
    """What a decode step must read: the bytes of every tensor but the routed experts' (the
    embedding's rows aside) plus, per layer, the distinct experts the step's tokens chose, as
    llama.cpp routed them (its ffn_moe_topk, seen through the eval callback; tokenmill's routing
    equals it, tests/model/moe_routing_test.cc). Returns (mean bytes per step, mean fraction of
    the experts touched, bytes of all experts)."""
    reader = GGUFReader(path)
    dense = sum(int(t.n_bytes) for t in reader.tensors
                if "_exps." not in t.name and t.name != "token_embd.weight")
    expert_bytes = sum(int(t.n_bytes) for t in reader.tensors if t.name.endswith(
        "blk.0.ffn_gate_exps.weight") or t.name.endswith("blk.0.ffn_up_exps.weight") or
        t.name.endswith("blk.0.ffn_down_exps.weight")) / N_EXPERT
    all_experts = sum(int(t.n_bytes) for t in reader.tensors if "_exps." in t.name)
    touched = []  # per (step, layer): distinct experts

    @llama_cpp.ggml_backend_sched_eval_callback
    def callback(t_ptr, ask, _user):
        if ask:
            return True
        t = GgmlTensor.from_address(t_ptr)
        if t.name.decode().startswith("ffn_moe_topk-") and t.ne[1] == n_streams:
            chosen = set()
            for r in range(t.ne[1]):
                chosen.update((ctypes.c_int32 * t.ne[0]).from_address(t.data + r * t.nb[1]))
            touched.append(len(chosen))
        return True

    llama_cpp_decode(path, n_streams, n_prompt, n_decode, threads, callback)
    per_step = dense + expert_bytes * sum(touched) / (len(touched) / N_LAYER)
    return per_step, sum(touched) / len(touched) / N_EXPERT, all_experts


def tokenmill_decode(build, path, n_streams, n_prompt, n_decode, threads):
    """tokenmill's decode tokens/s (tokenmill_throughput: n_streams requests at once)."""
    out = subprocess.run(
        [os.path.join(build, "bin", "tokenmill_throughput"), "--model", path,
         "--concurrency", str(n_streams), "--prompt-tokens", str(n_prompt),
         "--max-tokens", str(n_decode + 1), "--threads", str(threads), "--repeats", "1"],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[0])["decode_tokens_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out-dir", default="/tmp/tokenmill-bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--decode", type=int, default=32)
    args = ap.parse_args()
    path = model_path(args.out_dir)
    print(f"model {path}: {os.path.getsize(path) / 2**20:.0f} MiB; load average "
          f"{os.getloadavg()}", flush=True)
    for n_streams in (1, 16):
        need, fraction, all_experts = bytes_per_step(path, n_streams, args.prompt, 8,
                                                     args.threads)
        print(f"{n_streams} streams: a step touches {fraction:.1%} of each layer's experts and "
              f"must read {need / 2**20:.1f} MiB (all experts: {all_experts / 2**20:.0f} MiB)",
              flush=True)
        ours, theirs = [], []
        for run in range(args.runs):
            theirs.append(llama_cpp_decode(path, n_streams, args.prompt, args.decode,
                                           args.threads))
            ours.append(tokenmill_decode(args.build, path, n_streams, args.prompt, args.decode,
                                         args.threads))
            print(f"  {n_streams} streams run {run}: tokenmill {ours[-1]:.1f} tok/s, "
                  f"llama.cpp {theirs[-1]:.1f} tok/s", flush=True)
        ratio = statistics.median(o / t for o, t in zip(ours, theirs))
        print(f"{n_streams} streams: tokenmill {statistics.median(ours):.1f} tok/s, llama.cpp "
              f"{statistics.median(theirs):.1f} tok/s, median ratio {ratio:.2f}x", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
