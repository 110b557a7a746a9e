"""llama: pre-norm layers, grouped-query attention, RoPE on adjacent pairs, SwiGLU, untied
output."""
from .common import TinyWriter

ARCH = "llama"
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER = 64, 4, 2, 128, 2


def write(path, vocabulary_from=None, pooling_type=None):
    """vocabulary_from: as TinyWriter's (the e2e tests' server tokenizes); pooling_type: writes
    llama.pooling_type (TinyWriter.pooling), for the embeddings tests."""
    w = TinyWriter(path, ARCH, seed=21, vocabulary_from=vocabulary_from)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV)
    if pooling_type is not None:
        w.pooling(pooling_type)
    head_dim = N_EMBD // N_HEAD
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, head_dim)
        w.attention_output(p, N_EMBD, N_HEAD * head_dim)
        w.feed_forward(p, N_EMBD, N_FF)
    w.close()
