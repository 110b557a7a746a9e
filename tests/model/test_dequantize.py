"""Our reference dequantization against the gguf package's, bit for bit, on real tensors of every
type each model file holds: the two test models, the default model requantized by llama.cpp into
every type of issue 21 (tests/reference/requantize.py) and Gemma 3 270M Q4_K_M (both made or
fetched by scripts/setup). A type tokenmill does not dequantize yet is skipped, naming it."""
import os
import subprocess
from collections import defaultdict

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
MODEL_FILES = ["SmolLM2-135M-Instruct.Q4_1.gguf", "stories260K.gguf", "gemma-3-270m-q4_k_m.gguf"]
MODEL_FILES += [f"requantized/SmolLM2-135M-Instruct.{t}.gguf" for t in
                ["Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL",
                 "IQ4_NL_PURE", "IQ4_XS"]]
LARGE = 1 << 22  # elements: larger tensors only where a type has no smaller one
HUGE = 1 << 25  # elements: not written out (Gemma's 262144 x 640 embedding); others cover its type


def tensors_by_type(path):
    """{type name: up to two of its tensors (the first and the last)}, each under LARGE elements
    where the type has such tensors, never over HUGE (then none)."""
    by_type = defaultdict(list)
    for t in GGUFReader(path).tensors:
        by_type[t.tensor_type.name].append(t)
    picked = {}
    for name, tensors in by_type.items():
        small = ([t for t in tensors if t.n_elements < LARGE] or
                 [t for t in tensors if t.n_elements <= HUGE])
        picked[name] = list({t.name: t for t in small[:1] + small[-1:]}.values())
    return picked


def cases():
    """(file, type) for every type of every file present; a missing file is one skipped case."""
    out = []
    for model in MODEL_FILES:
        path = os.path.join(MODELS, model)
        if not os.path.exists(path):
            out.append(pytest.param(model, None, marks=pytest.mark.skip(
                reason=f"{path} is missing: scripts/setup makes it"), id=model))
            continue
        out += [pytest.param(model, name, id=f"{model}:{name}") for name in tensors_by_type(path)]
    return out


@pytest.mark.parametrize("model,type_name", cases())
def test_dequantization_matches_gguf_package(model, type_name, tmp_path):
    path = os.path.join(MODELS, model)
    tensors = tensors_by_type(path)[type_name]
    if not tensors:
        pytest.skip(f"{type_name}: its only tensors here are over {HUGE} elements")
    for tensor in tensors:
        out = tmp_path / "t.f32"
        r = subprocess.run([BIN, "dequantize", "--model", path, "--tensor", tensor.name,
                            "--out", str(out)], capture_output=True, text=True)
        if "which tokenmill cannot dequantize" in r.stderr:
            pytest.skip(f"{type_name}: tokenmill has no reference dequantization for it yet")
        assert r.returncode == 0, r.stderr
        ours = np.fromfile(out, dtype=np.float32)
        expected = dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(-1)
        assert ours.shape == expected.shape, tensor.name
        # Bit-exact: both compute d * q (+ m) in float32 from the same f16 fields.
        np.testing.assert_array_equal(ours, expected, err_msg=f"{model}:{tensor.name}")


def test_unknown_tensor_is_a_clear_error(tmp_path):
    path = os.path.join(MODELS, "stories260K.gguf")
    r = subprocess.run([BIN, "dequantize", "--model", path, "--tensor", "nope", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "no tensor 'nope'" in r.stderr
