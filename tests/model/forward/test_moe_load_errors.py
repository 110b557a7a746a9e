"""Mixture-of-experts files tokenmill cannot run are refused at load with an error naming the
key or the tensor to fix (never a crash): expert_used_count above expert_count or zero, a
missing expert tensor, expert tensors holding another number of experts or another width than
the keys say, a router of the wrong shape."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from tiny_families.common import VOCAB, TinyWriter  # noqa: E402

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF_EXP = 64, 4, 2, 16, 32


def write(path, n_expert=8, n_used=2, tensor_experts=8, tensor_ff=N_FF_EXP, router_rows=8,
          skip=None):
    w = TinyWriter(path, "qwen3moe", seed=1)
    w.hparams(n_layer=1, n_embd=N_EMBD, n_ff=64, n_head=N_HEAD, n_kv=N_KV, head_dim=HEAD_DIM)
    w.expert_keys(n_expert, n_used, n_ff_exp=N_FF_EXP)
    w.embedding(N_EMBD)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", VOCAB, N_EMBD)
    p = "blk.0."
    w.attention(p, N_EMBD, N_HEAD, N_KV, HEAD_DIM)
    w.head_norms(p, HEAD_DIM)
    w.attention_output(p, N_EMBD, N_HEAD * HEAD_DIM)
    w.vector(p + "ffn_norm.weight", N_EMBD)
    w.matrix(p + "ffn_gate_inp.weight", router_rows, N_EMBD)
    for name, rows, cols in [("ffn_gate_exps", tensor_ff, N_EMBD),
                             ("ffn_up_exps", tensor_ff, N_EMBD),
                             ("ffn_down_exps", N_EMBD, tensor_ff)]:
        if name != skip:
            w.w.add_tensor(p + name + ".weight",
                           w.rng.standard_normal((tensor_experts, rows, cols)).astype("float32"))
    w.close()


CASES = {
    "used_above_count": (dict(n_used=9), "qwen3moe.expert_used_count is 9: it must be between "
                                         "1 and qwen3moe.expert_count (8)"),
    "used_zero": (dict(n_used=0), "qwen3moe.expert_used_count is 0"),
    "missing_down": (dict(skip="ffn_down_exps"),
                     "no tensor 'blk.0.ffn_down_exps.weight' (expected shape [32, 64, 8])"),
    "fewer_experts": (dict(tensor_experts=7),
                      "tensor 'blk.0.ffn_gate_exps.weight' has shape [64, 32, 7], "
                      "expected [64, 32, 8]"),
    "other_width": (dict(tensor_ff=48),
                    "tensor 'blk.0.ffn_gate_exps.weight' has shape [64, 48, 8], "
                    "expected [64, 32, 8]"),
    "router_rows": (dict(router_rows=6),
                    "tensor 'blk.0.ffn_gate_inp.weight' has shape [64, 6], expected [64, 8]"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_expert_files_are_refused_naming_what_to_fix(tmp_path, case):
    kwargs, message = CASES[case]
    path = str(tmp_path / "bad.gguf")
    write(path, **kwargs)
    result = subprocess.run([BIN, "generate", "--model", path, "--prompt-tokens", "1,2,3",
                             "--max-tokens", "2", "--json"], capture_output=True, text=True)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert message in result.stderr, result.stderr


def test_a_good_file_runs(tmp_path):
    path = str(tmp_path / "good.gguf")
    write(path)
    result = subprocess.run([BIN, "generate", "--model", path, "--prompt-tokens", "1,2,3",
                             "--max-tokens", "2", "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
