"""llama as Llama 3.1 and 3.2 publish it: RoPE frequency factors (rope_freqs.weight, divisors
from 1 to 8 as Llama 3's low-frequency scaling gives), base 500000, a tied output (Llama 3.2
1B and 3B: no output.weight) and a 2-head KV group of 4 query heads."""
import numpy as np

from .common import TinyWriter

ARCH = "llama"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 64, 8, 2, 128, 2


def write(path):
    w = TinyWriter(path, ARCH, seed=42)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              rope_base=500000.0)
    head_dim = N_EMBD // N_HEAD
    w.w.add_tensor("rope_freqs.weight",
                   np.geomspace(1.0, 8.0, head_dim // 2).astype(np.float32))
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, head_dim)
        w.attention_output(p, N_EMBD, N_HEAD * head_dim)
        w.feed_forward(p, N_EMBD, N_FF)
    w.close()
