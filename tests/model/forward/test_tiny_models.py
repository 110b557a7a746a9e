"""Architectures and weight types the two real test models do not cover, end to end:
tiny random models written with the gguf package (qwen2 with QKV biases and NeoX RoPE;
llama with F16, BF16, Q8_0 and Q4_0 weights), whose greedy tokens from
`tokenmill generate` must equal those of the NumPy reference (numpy_forward.py)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import gguf
from gguf import GGMLQuantizationType as T

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from numpy_forward import NumpyModel  # noqa: E402

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
N_EMBD, N_HEAD, N_KV, N_FF, N_LAYER, VOCAB = 64, 4, 2, 96, 2, 100


def write_model(path, arch, matrix_type, bias=False):
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(N_LAYER)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_context_length(128)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)

    def matrix(name, rows, cols, scale=0.3):
        data = (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols) * 4).astype(np.float32)
        if matrix_type == T.F32:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, gguf.quants.quantize(data, matrix_type), raw_dtype=matrix_type)

    def vector(name, n, around=1.0):
        w.add_tensor(name, (around + 0.1 * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", VOCAB, N_EMBD, scale=1.0)
    vector("output_norm.weight", N_EMBD)
    matrix("output.weight", VOCAB, N_EMBD, scale=2.0)
    head_dim = N_EMBD // N_HEAD
    for i in range(N_LAYER):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", N_EMBD)
        matrix(p + "attn_q.weight", N_EMBD, N_EMBD)
        matrix(p + "attn_k.weight", N_KV * head_dim, N_EMBD)
        matrix(p + "attn_v.weight", N_KV * head_dim, N_EMBD)
        if bias:
            vector(p + "attn_q.bias", N_EMBD, around=0.0)
            vector(p + "attn_k.bias", N_KV * head_dim, around=0.0)
            vector(p + "attn_v.bias", N_KV * head_dim, around=0.0)
        matrix(p + "attn_output.weight", N_EMBD, N_EMBD)
        vector(p + "ffn_norm.weight", N_EMBD)
        matrix(p + "ffn_gate.weight", N_FF, N_EMBD)
        matrix(p + "ffn_up.weight", N_FF, N_EMBD)
        matrix(p + "ffn_down.weight", N_EMBD, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def numpy_greedy(path, prompt, n):
    model = NumpyModel(path)
    tokens = list(prompt)
    gaps = []
    for _ in range(n):
        logits = model.forward(tokens)[-1]
        top = np.sort(logits)[-2:]
        gaps.append(float(top[1] - top[0]))
        tokens.append(int(np.argmax(logits)))
    return tokens[len(prompt):], min(gaps)


CASES = [
    ("qwen2", T.F32, True),
    ("llama", T.F16, False),
    ("llama", T.BF16, False),
    ("llama", T.Q8_0, False),
    ("llama", T.Q4_0, False),
]


@pytest.mark.parametrize("arch,matrix_type,bias", CASES,
                         ids=[f"{a}-{t.name}" for a, t, _ in CASES])
def test_greedy_tokens_match_numpy(tmp_path, arch, matrix_type, bias):
    path = str(tmp_path / "tiny.gguf")
    write_model(path, arch, matrix_type, bias)
    prompt = [3, 14, 15, 92, 65, 35]
    expected, min_gap = numpy_greedy(path, prompt, 12)
    for isa in ["scalar", "avx2", "avx512vnni"]:
        result = subprocess.run(
            [BIN, "generate", "--model", path, "--prompt-tokens", ",".join(map(str, prompt)),
             "--max-tokens", "12", "--ignore-eos", "--json", "--isa", isa, "--threads", "2"],
            capture_output=True, text=True)
        if result.returncode != 0 and "lacks it" in result.stderr:
            continue  # this CPU has no such ISA
        assert result.returncode == 0, result.stderr
        ours = json.loads(result.stdout)["tokens"]
        assert ours == expected, f"{isa}: ours {ours}, NumPy {expected} (min top-2 gap {min_gap})"
