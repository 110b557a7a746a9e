"""bert: an encoder (BGE, MiniLM): token, token-type and position embeddings LayerNorm'd,
post-norm layers of bidirectional attention with biases and an ungated GELU feed-forward, no
output norm or head; written as llama.cpp's convert_hf_to_gguf.py writes BertModel (no RoPE,
attention.causal false, tokenizer.ggml.token_type_count 2)."""
import gguf

from .common import CONTEXT, TinyWriter

ARCH = "bert"
N_EMBD, N_HEAD, N_FF, N_LAYER = 64, 4, 128, 2


def write(path, vocabulary_from=None, pooling_type=None, classifier=False, rerank_template=None):
    """vocabulary_from: a WordPiece vocabulary (models/ggml-vocab-bert-bge.gguf) for a server
    that tokenizes; pooling_type as TinyWriter.pooling (BGE's files say 2, cls; a reranker's 4,
    rank); classifier: a reranker's head (cls: dense + tanh, cls.output: one label);
    rerank_template: tokenizer.chat_template.rerank, as llama.cpp's server reads it."""
    w = TinyWriter(path, ARCH, seed=31, vocabulary_from=vocabulary_from)
    encoder_keys(w, N_FF, vocabulary_from, pooling_type)
    if rerank_template is not None:
        w.w.add_string("tokenizer.chat_template.rerank", rerank_template)
    w.embedding(N_EMBD, gain=8.0)
    w.matrix("token_types.weight", 2, N_EMBD, gain=4.0)
    w.matrix("position_embd.weight", CONTEXT, N_EMBD, gain=4.0)
    layer_norm(w, "token_embd_norm")
    for i in range(N_LAYER):
        p = f"blk.{i}."
        for name, rows in (("attn_q", N_EMBD), ("attn_k", N_EMBD), ("attn_v", N_EMBD)):
            w.matrix(p + name + ".weight", rows, N_EMBD, gain=2.0)
            w.vector(p + name + ".bias", rows, around=0.0)
        w.matrix(p + "attn_output.weight", N_EMBD, N_EMBD)
        w.vector(p + "attn_output.bias", N_EMBD, around=0.0)
        layer_norm(w, p + "attn_output_norm")
        w.matrix(p + "ffn_up.weight", N_FF, N_EMBD, gain=2.0)
        w.vector(p + "ffn_up.bias", N_FF, around=0.0)
        w.matrix(p + "ffn_down.weight", N_EMBD, N_FF)
        w.vector(p + "ffn_down.bias", N_EMBD, around=0.0)
        layer_norm(w, p + "layer_output_norm")
    if classifier:
        w.matrix("cls.weight", N_EMBD, N_EMBD, gain=2.0)
        w.vector("cls.bias", N_EMBD, around=0.0)
        w.matrix("cls.output.weight", 1, N_EMBD, gain=2.0)
        w.vector("cls.output.bias", 1, around=0.0)
    w.close()


def encoder_keys(w, n_ff, vocabulary_from, pooling_type):
    """An encoder's keys (N_LAYER layers of N_EMBD, N_HEAD heads; attention both ways), its
    two token types and its pooling_type (TinyWriter.pooling) unless None."""
    w.w.add_block_count(N_LAYER)
    w.w.add_embedding_length(N_EMBD)
    w.w.add_feed_forward_length(n_ff)
    w.w.add_head_count(N_HEAD)
    w.w.add_context_length(CONTEXT)
    w.w.add_layer_norm_eps(1e-12)
    w.w.add_causal_attention(False)
    if vocabulary_from is None:  # a WordPiece vocabulary's keys hold it
        w.w.add_token_type_count(2)
    if pooling_type is not None:
        w.pooling(pooling_type)


def layer_norm(w, name):
    w.vector(name + ".weight", N_EMBD)
    w.vector(name + ".bias", N_EMBD, around=0.0)
