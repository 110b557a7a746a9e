"""KV shared across layers (gemma4's attention.shared_kv_layers, gemma3n's 20 storing layers
that llama.cpp hard-codes): `tokenmill info` says which layer's KV each layer reads, as
llama.cpp's reuse rule gives it (with K the first layer that stores nothing, a sliding one
reads layer K - 2, a full one K - 1), and counts a token's KV bytes over the layers that store
only; a model without sharing stores every layer; sharing llama.cpp
cannot run, and hostile per-layer metadata (a huge block_count, per-layer arrays of the wrong
length or with zeros, a sliding head larger than the full one), are refused at load naming the
key (never a crash). The files are the tiny models of
tests/reference/tiny_families/, the expectations worked out here from their shapes. That the
shared layers then give llama.cpp's logits is test_tiny_families.py's, through the engine's
KV groups test_sliding_window_kv.py's."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from tiny_families import gemma3, gemma3n, gemma4  # noqa: E402
from tiny_families.common import TinyWriter  # noqa: E402

from load_errors import load_error  # noqa: E402

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
F16 = 2


def info(path):
    result = subprocess.run([BIN, "info", "--model", path], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["kv_cache"]


def test_info_counts_the_storing_layers_only(tmp_path):
    path = str(tmp_path / "gemma4.gguf")
    gemma4.write(path)
    first_shared = gemma4.N_LAYER - gemma4.N_SHARED
    reads = [layer if layer < first_shared else first_shared - (2 if gemma4.SLIDING[layer] else 1)
             for layer in range(gemma4.N_LAYER)]
    head = [gemma4.HEAD_SWA if sliding else gemma4.HEAD_FULL for sliding in gemma4.SLIDING]
    stored = sum(2 * gemma4.N_KV * head[layer] * F16 for layer in range(first_shared))
    every_layer = sum(2 * gemma4.N_KV * h * F16 for h in head)
    kv = info(path)
    assert kv["layer_reads_kv_of"] == reads
    assert kv["storing_layers"] == first_shared
    assert kv["bytes_per_token_f16"] == stored
    assert stored < every_layer


def test_gemma3n_stores_its_first_20_layers(tmp_path):
    path = str(tmp_path / "gemma3n.gguf")
    gemma3n.write(path)
    reads = [layer if layer < 20 else 20 - (2 if gemma3n.SLIDING[layer] else 1)
             for layer in range(gemma3n.N_LAYER)]
    kv = info(path)
    assert kv["layer_reads_kv_of"] == reads
    assert kv["storing_layers"] == 20
    assert kv["bytes_per_token_f16"] == 20 * 2 * gemma3n.N_KV * gemma3n.HEAD_DIM * F16


def test_a_model_without_sharing_stores_every_layer(tmp_path):
    path = str(tmp_path / "gemma3.gguf")
    gemma3.write(path)
    kv = info(path)
    assert kv["layer_reads_kv_of"] == list(range(gemma3.N_LAYER))
    assert kv["bytes_per_token_f16"] == 2 * gemma3.N_LAYER * gemma3.N_KV * gemma3.HEAD_DIM * F16


@pytest.mark.parametrize("shared,message", [
    # Only layer 0 would store: llama.cpp asserts at least 2.
    (11, "gemma4.attention.shared_kv_layers 11 leaves fewer than 2 of 12 layers storing KV"),
    # The first shared layer is 10, so the full layer 11 would read layer 9, a sliding one.
    (2, "layer 11 reads the KV of layer 9, which must be an earlier layer of the same kind and "
        "shape that stores its own"),
])
def test_sharing_llama_cpp_cannot_run_is_refused_by_name(tmp_path, monkeypatch, shared, message):
    monkeypatch.setattr(gemma4, "N_SHARED", shared)
    path = str(tmp_path / "gemma4.gguf")
    gemma4.write(path)
    assert message in load_error(path)
@pytest.mark.parametrize("n_layer,n_ff,n_kv,message", [
    (100000, 64, 2, "llama.block_count is 100000: a model has 1 to 4096 layers"),
    (2, [64, 64, 64], 2, "llama.feed_forward_length has 3 values: it must be one, or one per "
                         "layer (2)"),
    (2, 64, [2, 0], "llama.attention.head_count_kv must be positive"),
    (2, 64, [2, 3], "KV heads 3 (heads must be a multiple)"),
])
def test_hostile_per_layer_metadata_is_refused_by_name(tmp_path, n_layer, n_ff, n_kv, message):
    path = str(tmp_path / "llama.gguf")
    w = TinyWriter(path, "llama", seed=1)
    w.hparams(n_layer=n_layer, n_embd=64, n_ff=n_ff, n_head=4, n_kv=n_kv)
    w.embedding(64)
    w.close()
    assert message in load_error(path)


def test_a_sliding_head_larger_than_the_full_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gemma4, "HEAD_SWA", 2 * gemma4.HEAD_FULL)
    path = str(tmp_path / "gemma4.gguf")
    gemma4.write(path)
    assert "gemma4.attention.key_length_swa 128" in load_error(path)
