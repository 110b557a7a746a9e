"""gemma2: gemma's layer with post-norms, soft-capped attention scores (cap 2, below the
scores' size) and logits (cap 5), and a sliding window of 6 on the even layers (llama.cpp's
default period 2), so both caps and the window bite within the prompts."""
from .common import TinyWriter

ARCH = "gemma2"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 64, 4, 2, 32, 128, 4


def write(path):
    w = TinyWriter(path, ARCH, seed=25)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM)
    w.w.add_sliding_window(6)
    w.w.add_attn_logit_softcapping(2.0)
    w.w.add_final_logit_softcapping(5.0)
    w.embedding(N_EMBD, gain=4.0)
    w.vector("output_norm.weight", N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, HEAD_DIM)
        w.attention_output(p, N_EMBD, N_HEAD * HEAD_DIM)
        w.vector(p + "post_attention_norm.weight", N_EMBD)
        w.feed_forward(p, N_EMBD, N_FF)
        w.vector(p + "post_ffw_norm.weight", N_EMBD)
    w.close()
