"""Our reference dequantization against the gguf package's, on real tensors of both models."""
import os
import subprocess
from collections import defaultdict

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
MODEL_FILES = ["SmolLM2-135M-Instruct.Q4_1.gguf", "stories260K.gguf"]


def tensors_to_check(path):
    """Every tensor of the tiny model; for the default model, up to three of each type
    (the first, the largest and one more), which covers every type it uses."""
    reader = GGUFReader(path)
    by_type = defaultdict(list)
    for t in reader.tensors:
        by_type[t.tensor_type.name].append(t)
    picked = []
    for tensors in by_type.values():
        if len(reader.tensors) < 100:
            picked += tensors
        else:
            largest = max(tensors, key=lambda t: t.n_elements)
            picked += list({t.name: t for t in [tensors[0], largest, tensors[len(tensors) // 2]]}.values())
    return picked


@pytest.mark.parametrize("model", MODEL_FILES)
def test_dequantization_matches_gguf_package(model, tmp_path):
    path = os.path.join(MODELS, model)
    checked_types = set()
    for tensor in tensors_to_check(path):
        out = tmp_path / "t.f32"
        subprocess.run([BIN, "dequantize", "--model", path, "--tensor", tensor.name, "--out", str(out)],
                       check=True)
        ours = np.fromfile(out, dtype=np.float32)
        expected = dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(-1)
        assert ours.shape == expected.shape, tensor.name
        # Bit-exact: both compute d * q (+ m) in float32 from the same f16 fields.
        np.testing.assert_array_equal(ours, expected, err_msg=f"{model}:{tensor.name}")
        checked_types.add(tensor.tensor_type.name)
    assert checked_types, "no tensor was checked"
    print(model, "checked types:", sorted(checked_types))


def test_unknown_tensor_is_a_clear_error(tmp_path):
    path = os.path.join(MODELS, "stories260K.gguf")
    r = subprocess.run([BIN, "dequantize", "--model", path, "--tensor", "nope", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "no tensor 'nope'" in r.stderr
