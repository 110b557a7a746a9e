"""tokenmill_synthetic_model's file read by an independent parser (the gguf package): the
llama metadata, every tensor's name, shape and type, weights dequantized by gguf.quants with a
trained model's spread (std ~0.02, mean ~0), `tokenmill info` showing the same tensors, and a
vocabulary taken from another file (--vocab-from) that our tokenizer loads."""
import json
import os
import subprocess

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

BIN = os.environ["TOKENMILL_BIN_DIR"]
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
SMALL = ["--layers", "2", "--embd", "256", "--heads", "8", "--kv-heads", "2", "--ff", "512",
         "--vocab", "1000"]


def write(tmp_path, *args):
    path = tmp_path / "synthetic.gguf"
    subprocess.run([os.path.join(BIN, "tokenmill_synthetic_model"), "--out", str(path), *SMALL,
                    *args], check=True, capture_output=True, text=True)
    return path


def field(reader, key):
    f = reader.fields[key]
    value = f.parts[f.data[0]]
    return bytes(value).decode() if f.types[0].name == "STRING" else value[0]


@pytest.mark.parametrize("matrix_type", ["q4_0", "q5_0", "q5_1", "iq4_nl", "q8_0", "q4_k"])
def test_the_gguf_package_reads_a_llama_with_gqa(tmp_path, matrix_type):
    reader = GGUFReader(write(tmp_path, "--type", matrix_type))
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "llama.block_count") == 2
    assert field(reader, "llama.attention.head_count") == 8
    assert field(reader, "llama.attention.head_count_kv") == 2
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 2 * 9
    expected = {"token_embd.weight": ([256, 1000], matrix_type),
                "output.weight": ([256, 1000], "q6_k" if matrix_type == "q4_k" else "q8_0"),
                "output_norm.weight": ([256], "f32"),
                "blk.1.attn_q.weight": ([256, 256], matrix_type),
                "blk.1.attn_k.weight": ([256, 64], matrix_type),  # 2 KV heads of 32
                "blk.1.attn_v.weight": ([256, 64], matrix_type),
                "blk.1.ffn_gate.weight": ([256, 512], matrix_type),
                "blk.1.ffn_down.weight": ([512, 256], matrix_type)}
    for name, (shape, type_name) in expected.items():
        assert [int(d) for d in tensors[name].shape] == shape, name
        assert tensors[name].tensor_type.name.lower() == type_name, name
    for name in ["blk.0.ffn_up.weight", "output.weight", "token_embd.weight"]:
        w = dequantize(tensors[name].data, tensors[name].tensor_type)
        assert 0.015 < w.std() < 0.025, name
        assert abs(w.mean()) < 0.003, name
        assert len(np.unique(w)) > 100, name  # per-block scales differ
    assert np.all(dequantize(tensors["blk.0.attn_norm.weight"].data,
                             tensors["blk.0.attn_norm.weight"].tensor_type) == 1.0)


def test_tokenmill_info_shows_the_shapes_and_types(tmp_path):
    path = write(tmp_path)
    info = json.loads(subprocess.run([os.path.join(BIN, "tokenmill"), "info", "--model", str(path)],
                                     check=True, capture_output=True, text=True).stdout)
    ours = {t["name"]: (t["shape"], t["type"]) for t in info["tensors"]}
    theirs = {t.name: ([int(d) for d in t.shape], t.tensor_type.name.lower())
              for t in GGUFReader(path).tensors}
    assert ours == theirs
    # 7 matrices per layer and the embedding; the output; 2 norms per layer and the last.
    assert {m["type"]: m["tensors"] for m in info["type_mix"]} == {"q4_0": 15, "q8_0": 1,
                                                                  "f32": 5}


def test_a_type_it_cannot_write_is_refused_by_name(tmp_path):
    run = subprocess.run([os.path.join(BIN, "tokenmill_synthetic_model"), "--out",
                          str(tmp_path / "x.gguf"), "--type", "mxfp4"], capture_output=True,
                         text=True)
    assert run.returncode == 2
    assert "--type mxfp4: use q4_0," in run.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_vocab_from_takes_every_tokenizer_key_and_our_tokenizer_reads_them(tmp_path):
    vocab = os.path.join(MODELS, "ggml-vocab-llama-bpe.gguf")  # Llama 3's 128256 tokens
    path = tmp_path / "with-vocab.gguf"
    subprocess.run([os.path.join(BIN, "tokenmill_synthetic_model"), "--out", str(path),
                    *SMALL[:-2], "--vocab", "128256", "--vocab-from", vocab], check=True)
    # The vocabulary file's keys as `tokenmill info` renders them (types, counts, first items);
    # the ids below show every token and merge arrived (GGUFReader takes 8 s a file here).
    def tokenizer_keys(model):
        info = json.loads(subprocess.run([os.path.join(BIN, "tokenmill"), "info", "--model",
                                          str(model)], check=True, capture_output=True,
                                         text=True).stdout)
        return {k: v for k, v in info["metadata"].items() if k.startswith("tokenizer.")}
    theirs = tokenizer_keys(vocab)
    assert "tokenizer.ggml.merges" in theirs and "tokenizer.ggml.tokens" in theirs
    assert tokenizer_keys(path) == theirs
    run = subprocess.run([os.path.join(BIN, "tokenmill"), "tokenize", "--model", str(path),
                          "--no-special", "Hello world"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [9906, 1917]  # Llama 3's "Hello", " world"


def test_vocab_from_refuses_a_vocabulary_of_another_size(tmp_path):
    vocab = os.path.join(MODELS, "ggml-vocab-llama-bpe.gguf")
    run = subprocess.run([os.path.join(BIN, "tokenmill_synthetic_model"), "--out",
                          str(tmp_path / "x.gguf"), *SMALL, "--vocab-from", vocab],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert "has 128256 tokens; give --vocab 128256" in run.stderr
