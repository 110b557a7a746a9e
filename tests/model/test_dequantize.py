"""Our reference dequantization against the gguf package's, bit for bit, on real tensors of every
type each model file holds: the two test models, the default model requantized by llama.cpp into
every type of issue 21 (tests/reference/requantize.py) and Gemma 3 270M Q4_K_M (both made or
fetched by scripts/setup). A type tokenmill does not dequantize yet is skipped, naming it."""
import functools
import os
import struct
import subprocess
from collections import defaultdict, namedtuple

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
MODEL_FILES = ["SmolLM2-135M-Instruct.Q4_1.gguf", "stories260K.gguf", "gemma-3-270m-q4_k_m.gguf"]
MODEL_FILES += [f"requantized/SmolLM2-135M-Instruct.{t}.gguf" for t in
                ["Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL",
                 "IQ4_NL_PURE", "IQ4_XS"]]
LARGE = 1 << 22  # elements: larger tensors only where a type has no smaller one
HUGE = 1 << 25  # elements: not written out (Gemma's 262144 x 640 embedding); others cover its type


Tensor = namedtuple("Tensor", "name tensor_type n_elements data")
# Bytes of each GGUF metadata value type that has a fixed size (the GGUF specification).
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def read_tensors(path):
    """The file's tensors, their bytes mapped from disk, read from the header as the GGUF
    specification lays it out. Not gguf.GGUFReader: it builds every metadata array element in
    Python, minutes for Gemma's 262k-token vocabulary; the bytes are decoded by the gguf
    package's dequantize all the same."""
    with open(path, "rb") as f:
        head = f.read(64 << 20)  # the metadata and tensor infos of these files fit
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, head, pos)
        pos += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return head[pos - n:pos].decode()

    def skip_value(kind):
        nonlocal pos
        if kind == STRING:
            string()
        elif kind == ARRAY:
            inner, count = take("IQ")
            if inner in SCALAR_BYTES:
                pos += SCALAR_BYTES[inner] * count
            else:
                for _ in range(count):
                    skip_value(inner)
        else:
            pos += SCALAR_BYTES[kind]

    magic, _version, n_tensors, n_kv = take("4sIQQ")
    assert magic == b"GGUF", path
    alignment = 32
    for _ in range(n_kv):
        key, kind = string(), take("I")
        if key == "general.alignment":
            alignment = take("I")
        else:
            skip_value(kind)
    infos = []
    for _ in range(n_tensors):
        name, n_dims = string(), take("I")
        dims = [take("Q") for _ in range(n_dims)]
        kind, offset = take("IQ")
        infos.append((name, GGMLQuantizationType(kind), int(np.prod(dims)), offset))
    data_start = -(-pos // alignment) * alignment
    data = np.memmap(path, dtype=np.uint8, mode="r")
    tensors = []
    for name, kind, n_elements, offset in infos:
        block, size = GGML_QUANT_SIZES[kind]
        begin = data_start + offset
        tensors.append(Tensor(name, kind, n_elements,
                              data[begin:begin + n_elements // block * size]))
    return tensors


@functools.cache
def tensors_by_type(path):
    """{type name: up to two of its tensors (the first and the last)}, each under LARGE elements
    where the type has such tensors, never over HUGE (then none)."""
    by_type = defaultdict(list)
    for t in read_tensors(path):
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


def test_mxfp4_matches_gguf_package(tmp_path):
    """MXFP4 (gpt-oss's expert weights; no real file is reachable here): a tensor the gguf package
    quantizes from normal weights and one of random bytes (every exponent, subnormal ones
    included, and every nibble), written by the gguf package and read back by it."""
    import gguf
    rng = np.random.default_rng(39)
    path = str(tmp_path / "mxfp4.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    weights = (rng.standard_normal((8, 256)) * 0.02).astype(np.float32)
    writer.add_tensor("quantized", gguf.quants.quantize(weights, gguf.GGMLQuantizationType.MXFP4),
                      raw_dtype=gguf.GGMLQuantizationType.MXFP4)
    raw = rng.integers(0, 256, size=(256, 17), dtype=np.uint8)
    raw[:, 0] = np.arange(256)  # the exponent byte of block i is i
    writer.add_tensor("raw", raw.reshape(4, 64 * 17), raw_dtype=gguf.GGMLQuantizationType.MXFP4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for tensor in read_tensors(path):
        out = tmp_path / "t.f32"
        r = subprocess.run([BIN, "dequantize", "--model", path, "--tensor", tensor.name,
                            "--out", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        ours = np.fromfile(out, dtype=np.float32)
        with np.errstate(over="ignore"):  # exponent 255 times 12 is inf, in both
            expected = dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(-1)
        assert ours.shape == expected.shape, tensor.name
        np.testing.assert_array_equal(ours.view(np.uint32), expected.view(np.uint32),
                                      err_msg=tensor.name)


def test_unknown_tensor_is_a_clear_error(tmp_path):
    path = os.path.join(MODELS, "stories260K.gguf")
    r = subprocess.run([BIN, "dequantize", "--model", path, "--tensor", "nope", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "no tensor 'nope'" in r.stderr
