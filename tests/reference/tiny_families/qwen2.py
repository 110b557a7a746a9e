"""qwen2: llama's layer with biases on the Q, K and V projections, RoPE on NeoX pairs and a
tied output (no output.weight)."""
from .common import TinyWriter

ARCH = "qwen2"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 64, 4, 2, 128, 2


def write(path):
    w = TinyWriter(path, ARCH, seed=22)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV)
    head_dim = N_EMBD // N_HEAD
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, head_dim)
        w.vector(p + "attn_q.bias", N_HEAD * head_dim, around=0.0, spread=0.5)
        w.vector(p + "attn_k.bias", N_KV * head_dim, around=0.0, spread=0.5)
        w.vector(p + "attn_v.bias", N_KV * head_dim, around=0.0, spread=0.5)
        w.attention_output(p, N_EMBD, N_HEAD * head_dim)
        w.feed_forward(p, N_EMBD, N_FF)
    w.close()
