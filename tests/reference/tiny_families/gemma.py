"""gemma (1): embeddings scaled by √n_embd, GELU-tanh gated feed-forward, RoPE on NeoX pairs,
Q scaled by 1 / √head_dim, multi-query attention (one KV head), output tied to token_embd."""
from .common import TinyWriter

ARCH = "gemma"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 64, 4, 1, 128, 2


def write(path):
    w = TinyWriter(path, ARCH, seed=24)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV)
    head_dim = N_EMBD // N_HEAD
    # Entries of ~1 / √n_embd: unit entries once scaled, and logits of a few units (tied).
    w.embedding(N_EMBD, gain=4.0)
    w.vector("output_norm.weight", N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, head_dim)
        w.attention_output(p, N_EMBD, N_HEAD * head_dim)
        w.feed_forward(p, N_EMBD, N_FF)
    w.close()
