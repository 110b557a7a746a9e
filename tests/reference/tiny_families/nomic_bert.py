"""nomic-bert: an encoder (nomic-embed-text): token and token-type embeddings LayerNorm'd, no
position embeddings; post-norm layers of bidirectional attention whose Q, K and V are one
tensor, roped on NeoX-style pairs, and a SwiGLU feed-forward, no biases but the LayerNorms';
written as llama.cpp's convert_hf_to_gguf.py writes NomicBertModel (attention.causal false,
rope.freq_base 1000, tokenizer.ggml.token_type_count 2)."""

from .common import CONTEXT, TinyWriter

ARCH = "nomic-bert"
N_EMBD, N_HEAD, N_FF, N_LAYER = 64, 4, 96, 2


def write(path, vocabulary_from=None, pooling_type=None):
    """vocabulary_from: a WordPiece vocabulary (models/ggml-vocab-bert-bge.gguf; nomic-embed-text
    has bert-base-uncased's) for a server that tokenizes; pooling_type as TinyWriter.pooling
    (nomic-embed-text's files say 1, mean)."""
    w = TinyWriter(path, ARCH, seed=37, vocabulary_from=vocabulary_from)
    w.w.add_block_count(N_LAYER)
    w.w.add_embedding_length(N_EMBD)
    w.w.add_feed_forward_length(N_FF)
    w.w.add_head_count(N_HEAD)
    w.w.add_context_length(CONTEXT)
    w.w.add_layer_norm_eps(1e-12)
    w.w.add_causal_attention(False)
    w.w.add_rope_freq_base(1000.0)
    if vocabulary_from is None:  # a WordPiece vocabulary's keys hold it
        w.w.add_token_type_count(2)
    if pooling_type is not None:
        w.pooling(pooling_type)
    w.embedding(N_EMBD, gain=8.0)
    w.matrix("token_types.weight", 2, N_EMBD, gain=4.0)
    layer_norm(w, "token_embd_norm")
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.matrix(p + "attn_qkv.weight", 3 * N_EMBD, N_EMBD, gain=2.0)
        w.matrix(p + "attn_output.weight", N_EMBD, N_EMBD)
        layer_norm(w, p + "attn_output_norm")
        w.matrix(p + "ffn_gate.weight", N_FF, N_EMBD, gain=2.0)
        w.matrix(p + "ffn_up.weight", N_FF, N_EMBD, gain=2.0)
        w.matrix(p + "ffn_down.weight", N_EMBD, N_FF)
        layer_norm(w, p + "layer_output_norm")
    w.close()


def layer_norm(w, name):
    w.vector(name + ".weight", N_EMBD)
    w.vector(name + ".bias", N_EMBD, around=0.0)
