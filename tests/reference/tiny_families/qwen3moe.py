"""qwen3moe: qwen3's attention (per-head Q/K norms, NeoX RoPE) with a mixture of 16 experts,
top-3, renormalized weights; the router's rows come in tied pairs, so the third choice of every
token is a tie that ggml's argsort settles (the routing's tie order against llama.cpp's)."""
from .common import TinyWriter

ARCH = "qwen3moe"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 64, 4, 2, 32, 96, 2
N_EXPERT, N_USED, N_FF_EXP = 16, 3, 32


def write(path):
    w = TinyWriter(path, ARCH, seed=31)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=1000000.0)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    tensors(w, N_LAYER, N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_EXPERT, N_FF_EXP, tied_pairs=True)
    w.close()


def tensors(w, n_layer, n_embd, n_head, n_kv, head_dim, n_expert, n_ff_exp, tied_pairs=False):
    """A qwen3moe's tensors in the order every writer of one draws them (its goldens pin the
    bytes): the tiny families', bench/moe's and the MoE serving test's."""
    w.embedding(n_embd, gain=8.0)
    w.vector("output_norm.weight", n_embd)
    w.matrix("output.weight", w.vocab, n_embd, gain=4.0)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.attention(p, n_embd, n_head, n_kv, head_dim)
        w.head_norms(p, head_dim)
        w.attention_output(p, n_embd, n_head * head_dim)
        w.experts(p, n_embd, n_ff_exp, n_expert, tied_pairs=tied_pairs)
