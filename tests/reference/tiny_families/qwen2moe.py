"""qwen2moe: qwen2's attention (Q/K/V biases, NeoX RoPE; an output.weight of its own, which
llama.cpp requires) with 12 experts, top-4, weights not renormalized (a router softmax of one
full 8-float vector and a tail of 4, as ggml splits it), plus a shared expert wider than the
routed ones under its sigmoid gate; expert_feed_forward_length absent (feed_forward_length /
top-k)."""
from .common import VOCAB, TinyWriter

ARCH = "qwen2moe"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 64, 4, 2, 128, 2
N_EXPERT, N_USED, N_FF_SHEXP = 12, 4, 96


def write(path):
    w = TinyWriter(path, ARCH, seed=32)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV)
    w.expert_keys(N_EXPERT, N_USED, n_ff_shexp=N_FF_SHEXP)
    head_dim = N_EMBD // N_HEAD
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", VOCAB, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, head_dim)
        w.vector(p + "attn_q.bias", N_HEAD * head_dim, around=0.0, spread=0.5)
        w.vector(p + "attn_k.bias", N_KV * head_dim, around=0.0, spread=0.5)
        w.vector(p + "attn_v.bias", N_KV * head_dim, around=0.0, spread=0.5)
        w.attention_output(p, N_EMBD, N_HEAD * head_dim)
        w.experts(p, N_EMBD, N_FF // N_USED, N_EXPERT)
        w.shared_expert(p, N_EMBD, N_FF_SHEXP)
    w.close()
