"""gemma3: gemma2's layer with per-head Q/K norms and no attention soft-cap, 5 sliding-window
layers (window 8) to 1 global one (llama.cpp's default period 6), the global layer's RoPE base
1e6 with linear scaling 2 and the sliding layers' llama.cpp default base 10 000 unscaled,
head_dim != n_embd / n_head, and an untied output."""
from gguf import RopeScalingType

from .common import TinyWriter

ARCH = "gemma3"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 64, 4, 2, 32, 128, 6


def write(path, pattern=None, rope_base_swa=None, vocabulary_from=None):
    """vocabulary_from: as TinyWriter's (the e2e tests' server tokenizes)."""
    w = TinyWriter(path, ARCH, seed=26, vocabulary_from=vocabulary_from)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=1000000.0)
    w.w.add_sliding_window(8)
    w.w.add_rope_scaling_type(RopeScalingType.LINEAR)
    w.w.add_rope_scaling_factor(2.0)
    if pattern is not None:
        w.w.add_sliding_window_pattern(pattern)
    if rope_base_swa is not None:
        w.w.add_rope_freq_base_swa(rope_base_swa)
    w.embedding(N_EMBD, gain=4.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, HEAD_DIM)
        w.head_norms(p, HEAD_DIM)
        w.attention_output(p, N_EMBD, N_HEAD * HEAD_DIM)
        w.vector(p + "post_attention_norm.weight", N_EMBD)
        w.feed_forward(p, N_EMBD, N_FF)
        w.vector(p + "post_ffw_norm.weight", N_EMBD)
    w.close()

