"""phi3 as the 128k Phi-3 models publish it: Q, K and V fused (attn_qkv), gate and up fused
(ffn_up, the gate rows first), NeoX RoPE with LongRoPE's long factors (the configured context,
CONTEXT, exceeds the original 32) and its attention factor on cos and sin, Qcur scaled by
1/sqrt(head_dim) before the attention (head_dim 24: not a power of two, so the order shows), a
sliding window llama.cpp ignores, tied output."""
import numpy as np

from .common import CONTEXT, TinyWriter

ARCH = "phi3"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 96, 4, 2, 128, 2
ORIGINAL_CONTEXT = 32


def write(path, original_context=ORIGINAL_CONTEXT, context_length=CONTEXT):
    w = TinyWriter(path, ARCH, seed=31)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              rms_eps=1e-5, context_length=context_length)
    w.w.add_rope_scaling_orig_ctx_len(original_context)
    w.w.add_rope_scaling_attn_factors(1.19)
    w.w.add_sliding_window(8)
    head_dim = N_EMBD // N_HEAD
    # Frequency divisors growing from 1 to ~11 over the pairs, as long factors do; the short
    # ones near 1.
    w.w.add_tensor("rope_factors_long.weight",
                   (1.0 + 0.9 * np.arange(head_dim // 2)).astype(np.float32))
    w.vector("rope_factors_short.weight", head_dim // 2, around=1.05, spread=0.02)
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.vector(p + "attn_norm.weight", N_EMBD)
        w.matrix(p + "attn_qkv.weight", (N_HEAD + 2 * N_KV) * head_dim, N_EMBD, gain=2.0)
        w.matrix(p + "attn_output.weight", N_EMBD, N_HEAD * head_dim)
        w.vector(p + "ffn_norm.weight", N_EMBD)
        w.matrix(p + "ffn_up.weight", 2 * N_FF, N_EMBD)
        w.matrix(p + "ffn_down.weight", N_EMBD, N_FF)
    w.close()
