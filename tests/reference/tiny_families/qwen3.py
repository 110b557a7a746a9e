"""qwen3: llama's layer with per-head RMS norms of Q and K, RoPE on NeoX pairs, head_dim 32
with 4 heads over n_embd 64 (head_dim != n_embd / n_head) and an untied output."""
from .common import TinyWriter

ARCH = "qwen3"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 64, 4, 2, 32, 128, 2


def write(path, vocabulary_from=None, pooling_type=None, reranker_template=None):
    """vocabulary_from: as TinyWriter's (the e2e tests' server tokenizes); pooling_type: writes
    qwen3.pooling_type (TinyWriter.pooling), as Qwen3-Embedding's files say 3 (last).
    reranker_template: a Qwen3-Reranker as llama.cpp's converter writes one: its rerank
    template, classifier.output_labels yes and no, and cls.output.weight the output rows of
    two tokens (the converter takes lm_head's rows of "yes" and "no"); pooling_type 4 (rank)."""
    w = TinyWriter(path, ARCH, seed=23, vocabulary_from=vocabulary_from)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=1000000.0)
    if pooling_type is not None:
        w.pooling(pooling_type)
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    if reranker_template is not None:
        w.w.add_string("tokenizer.chat_template.rerank", reranker_template)
        w.w.add_classifier_output_labels(["yes", "no"])
        w.matrix("cls.output.weight", 2, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, HEAD_DIM)
        w.head_norms(p, HEAD_DIM)
        w.attention_output(p, N_EMBD, N_HEAD * HEAD_DIM)
        w.feed_forward(p, N_EMBD, N_FF)
    w.close()
