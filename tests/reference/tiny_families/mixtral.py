"""Mixtral: llama's layer (adjacent-pair RoPE, GQA, untied output) with 8 experts of
feed_forward_length each, top-2, renormalized weights."""
from .common import VOCAB, TinyWriter

ARCH = "llama"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 64, 4, 2, 48, 2
N_EXPERT, N_USED = 8, 2


def write(path):
    w = TinyWriter(path, ARCH, seed=33)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV)
    w.expert_keys(N_EXPERT, N_USED)
    head_dim = N_EMBD // N_HEAD
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", VOCAB, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, head_dim)
        w.attention_output(p, N_EMBD, N_HEAD * head_dim)
        w.experts(p, N_EMBD, N_FF, N_EXPERT)
    w.close()
