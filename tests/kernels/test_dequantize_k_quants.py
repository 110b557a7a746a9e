"""Our reference dequantization of Q2_K..Q6_K and IQ4_XS against the gguf package's, bit for bit,
on tensors made by llama.cpp's own quantizer (quantize_row_* of llama-cpp-python's
libggml-cpu.so) and on random bytes with finite f16 scales (every quant and packed scale)."""
import ctypes
import glob
import os
import subprocess

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
# Byte offsets of each block's f16 scales (the rest is quants and packed sub-block scales).
F16_FIELDS = {"Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
              "IQ4_XS": [0]}
ROWS, COLS = 8, 1024


class _Traits(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


def ggml_quantizer():
    libs = glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", ".venv", "lib",
                                  "python3*", "site-packages", "llama_cpp", "lib", "libggml-cpu.so"))
    if not libs:
        pytest.skip("llama-cpp-python's libggml-cpu.so not found")
    lib = ctypes.CDLL(libs[0])
    lib.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_Traits)
    lib.ggml_cpu_init()
    from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def quantize(type_name, x):
        qtype = GGMLQuantizationType[type_name]
        block, size = 256, {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210,
                            "IQ4_XS": 136}[type_name]
        out = np.zeros(x.size // block * size, dtype=np.uint8)
        fn = from_float(lib.ggml_get_type_traits_cpu(int(qtype)).contents.from_float)
        for r in range(x.shape[0]):
            row = np.ascontiguousarray(x[r], dtype=np.float32)
            fn(row.ctypes.data, out[r * COLS // block * size:].ctypes.data, COLS)
        return out.reshape(x.shape[0], -1)
    return quantize


def random_blocks(type_name, rng):
    size = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210, "IQ4_XS": 136}[type_name]
    data = rng.integers(0, 256, size=(ROWS * COLS // 256, size), dtype=np.uint8)
    for at in F16_FIELDS[type_name]:
        data[:, at:at + 2] = rng.uniform(-0.05, 0.05, size=data.shape[0]).astype(np.float16) \
            .view(np.uint8).reshape(-1, 2)
    return data.reshape(ROWS, -1)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    quantize = ggml_quantizer()
    rng = np.random.default_rng(21)
    path = str(tmp_path_factory.mktemp("kq") / "k_quants.gguf")
    writer = GGUFWriter(path, "llama")
    for name in TYPES:
        x = (rng.standard_normal((ROWS, COLS)) * rng.uniform(0.01, 1.0, (ROWS, 1))).astype(np.float32)
        for kind, data in (("quantized", quantize(name, x)), ("random", random_blocks(name, rng))):
            writer.add_tensor(f"{name}.{kind}", data, raw_dtype=GGMLQuantizationType[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("kind", ["quantized", "random"])
def test_dequantization_matches_gguf_package(model_path, type_name, kind, tmp_path):
    tensor = next(t for t in GGUFReader(model_path).tensors if t.name == f"{type_name}.{kind}")
    assert tensor.tensor_type.name == type_name
    out = tmp_path / "t.f32"
    subprocess.run([BIN, "dequantize", "--model", model_path, "--tensor", tensor.name,
                    "--out", str(out)], check=True)
    ours = np.fromfile(out, dtype=np.float32)
    expected = dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(-1)
    assert ours.shape == expected.shape
    assert np.isfinite(expected).all()
    np.testing.assert_array_equal(ours.view(np.uint32), expected.view(np.uint32), err_msg=tensor.name)
