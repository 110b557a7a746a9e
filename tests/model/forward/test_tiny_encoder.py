"""The tiny random bert (tests/reference/tiny_families/bert.py, F32) against llama.cpp's own
hidden states (llama-cpp-python in embedding mode with pooling none, computed live): two token
sequences computed together in one step by encoder_hidden, on every ISA, must each equal
llama.cpp's run of that sequence alone, every token's row within ROW_BOUND of its Euclidean
length (attention both ways, but never across sequences)."""
import os
import subprocess
import sys

import llama_cpp
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from llama_reference import llama_cpp_embedder, llama_cpp_hidden_states  # noqa: E402
from tiny_families import bert  # noqa: E402
from tiny_families.common import CONTEXT, VOCAB  # noqa: E402

TOOL = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "encoder_hidden")
# F32 weights and KV, each op as llama.cpp's: what is left is f32 sums in other orders.
ROW_BOUND = 1e-4
A = [int(t) for t in np.random.default_rng(5).integers(1, VOCAB, 37)]
B = [int(t) for t in np.random.default_rng(6).integers(1, VOCAB, 9)]


def test_hidden_states_match_llama_cpp_for_sequences_batched_together(tmp_path):
    model = str(tmp_path / "bert.gguf")
    bert.write(model)
    llm = llama_cpp_embedder(model, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE,
                             n_ctx=CONTEXT)
    want = np.concatenate([llama_cpp_hidden_states(llm, A), llama_cpp_hidden_states(llm, B)])
    result = subprocess.run([TOOL, model, ",".join(map(str, A)), ",".join(map(str, B)),
                             str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    runs = [f for f in os.listdir(tmp_path) if f.endswith(".f32")]
    assert "scalar.f32" in runs, runs
    for run in runs:
        got = np.fromfile(tmp_path / run, dtype=np.float32).reshape(want.shape)
        error = np.abs(got - want).max(axis=1) / np.linalg.norm(want, axis=1)
        assert error.max() < ROW_BOUND, f"{run}: token {error.argmax()} off by {error.max():.3g}"
    # Both ways: A's first row sees A's last token (a causal pass would not).
    shorter = llama_cpp_hidden_states(llm, A[:-1])
    assert np.abs(shorter[0] - want[0]).max() > 100 * ROW_BOUND * np.linalg.norm(want[0])
