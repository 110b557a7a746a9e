"""llama with YaRN RoPE scaling (factor 8 past an original context of 32, as Mistral and
Ministral files set rope.scaling.type yarn): each pair's angle mixed between the scaled and the
unscaled one by YaRN's ramp, and cos/sin times its magnitude factor."""
from gguf import RopeScalingType

from .common import VOCAB, TinyWriter

ARCH = "llama"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 64, 4, 1, 128, 2


def write(path):
    w = TinyWriter(path, ARCH, seed=41)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              rope_base=1000000.0)
    w.w.add_rope_scaling_type(RopeScalingType.YARN)
    w.w.add_rope_scaling_factor(8.0)
    w.w.add_rope_scaling_orig_ctx_len(32)
    head_dim = N_EMBD // N_HEAD
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", VOCAB, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, head_dim)
        w.attention_output(p, N_EMBD, N_HEAD * head_dim)
        w.feed_forward(p, N_EMBD, N_FF)
    w.close()
