"""Mixture-of-experts decode on the CPU: tokenmill vs llama.cpp (llama-cpp-python) on the
same generated qwen3moe GGUF, larger than the last-level cache (issue 23).

The model: 12 layers of hidden 512 (8 heads of 64, 2 KV heads), 64 experts of 512 each, top-8,
random weights (so routing spreads over the experts) and stories260K's vocabulary of 512
(both engines tokenize nothing: they get token ids). Written as Q8_0 by the gguf package, then
requantized by llama.cpp's own quantizer to Q4_K_M (experts' gate/up Q4_K, down Q4_K/Q6_K).

Both engines decode it at 1 and 16 streams as bench/decode/batched_decode.py does; before each
stream count, the bytes a step must read (the experts llama.cpp's router touched).

  .venv/bin/python bench/moe/moe_decode.py --build build --threads 2 --runs 3
"""
import ctypes
import os
import sys

import llama_cpp
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(ROOT, "bench", "decode"))
import batched_decode  # noqa: E402
from llama_cpp_dump import GgmlTensor  # noqa: E402
from tiny_families import qwen3moe  # noqa: E402
from tiny_families.common import TinyWriter  # noqa: E402

N_LAYER, N_EMBD, N_HEAD, N_KV, HEAD_DIM = 12, 512, 8, 2, 64
N_EXPERT, N_USED, N_FF_EXP = 64, 8, 512
VOCAB_SOURCE = os.path.join(ROOT, "models", "stories260K.gguf")


def write_q8_0(path):
    w = TinyWriter(path, "qwen3moe", seed=5, matrix_type=T.Q8_0, vocabulary_from=VOCAB_SOURCE)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF_EXP * N_USED, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    qwen3moe.tensors(w, N_LAYER, N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_EXPERT, N_FF_EXP)
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

    batched_decode.llama_cpp_decode(path, n_streams, n_prompt, n_decode, threads, callback)
    per_step = dense + expert_bytes * sum(touched) / (len(touched) / N_LAYER)
    return per_step, sum(touched) / len(touched) / N_EXPERT, all_experts


def main():
    ap = batched_decode.arguments(__doc__.split("\n")[0], model=False)
    ap.add_argument("--out-dir", default="/tmp/tokenmill-bench")
    args = ap.parse_args()
    path = model_path(args.out_dir)
    print(f"model {path}: {os.path.getsize(path) / 2**20:.0f} MiB; load average "
          f"{os.getloadavg()}", flush=True)
    for n_streams in map(int, args.streams.split(",")):
        need, fraction, all_experts = bytes_per_step(path, n_streams, args.prompt, 8,
                                                     args.threads)
        print(f"{n_streams} streams: a step touches {fraction:.1%} of each layer's experts and "
              f"must read {need / 2**20:.1f} MiB (all experts: {all_experts / 2**20:.0f} MiB)",
              flush=True)
        batched_decode.compare(args.build, path, n_streams, args.runs, args.prompt,
                               args.decode, args.threads)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
