"""nomic-bert: an encoder (nomic-embed-text): token and token-type embeddings LayerNorm'd, no
position embeddings; post-norm layers of bidirectional attention whose Q, K and V are one
tensor, roped on NeoX-style pairs, and a SwiGLU feed-forward, no biases but the LayerNorms';
written as llama.cpp's convert_hf_to_gguf.py writes NomicBertModel (attention.causal false,
rope.freq_base 1000, tokenizer.ggml.token_type_count 2)."""

from .bert import N_EMBD, N_LAYER, encoder_keys, layer_norm
from .common import TinyWriter

ARCH = "nomic-bert"
N_FF = 96


def write(path, vocabulary_from=None, pooling_type=None):
    """vocabulary_from: a WordPiece vocabulary (models/ggml-vocab-bert-bge.gguf; nomic-embed-text
    has bert-base-uncased's) for a server that tokenizes; pooling_type as TinyWriter.pooling
    (nomic-embed-text's files say 1, mean). bert's sizes (N_LAYER, N_EMBD, N_HEAD) but N_FF."""
    w = TinyWriter(path, ARCH, seed=37, vocabulary_from=vocabulary_from)
    encoder_keys(w, N_FF, vocabulary_from, pooling_type)
    w.w.add_rope_freq_base(1000.0)
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
