"""qwen3moe: qwen3's attention (per-head Q/K norms, NeoX RoPE) with a mixture of 16 experts,
top-3, renormalized weights; the router's rows come in tied pairs, so the third choice of every
token is a tie that ggml's argsort settles (the routing's tie order against llama.cpp's)."""
from .common import VOCAB, TinyWriter

ARCH = "qwen3moe"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 64, 4, 2, 32, 96, 2
N_EXPERT, N_USED, N_FF_EXP = 16, 3, 32


def write(path):
    w = TinyWriter(path, ARCH, seed=31)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=1000000.0)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", VOCAB, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, HEAD_DIM)
        w.head_norms(p, HEAD_DIM)
        w.attention_output(p, N_EMBD, N_HEAD * HEAD_DIM)
        w.experts(p, N_EMBD, N_FF_EXP, N_EXPERT, tied_pairs=True)
    w.close()
