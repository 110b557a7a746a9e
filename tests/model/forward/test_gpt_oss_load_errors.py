"""gpt-oss files tokenmill cannot run as llama.cpp would are refused at load with an error
naming the key or the tensor to fix (never a crash): a missing attention-sink, output-bias,
router-bias or expert-bias tensor, sinks of another length than the heads, the keys llama.cpp
requires (attention.sliding_window, expert_feed_forward_length) absent, no output.weight. The
files are the tiny gpt-oss of tests/reference/tiny_families/gpt_oss.py with one thing wrong.
And `tokenmill info` counts its total and active parameters."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from tiny_families import gpt_oss  # noqa: E402

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")

CASES = {
    "no_sinks": (dict(skip={"blk.0.attn_sinks.weight"}),
                 "the gpt-oss model: the model has no tensor 'blk.0.attn_sinks.weight' "
                 "(expected shape [4])"),
    "sinks_of_other_length": (dict(n_sinks=2),
                              "tensor 'blk.0.attn_sinks.weight' has shape [2], expected [4]"),
    "no_output_bias": (dict(skip={"blk.1.attn_output.bias"}),
                       "no tensor 'blk.1.attn_output.bias' (expected shape [64])"),
    "no_router_bias": (dict(skip={"blk.0.ffn_gate_inp.bias"}),
                       "no tensor 'blk.0.ffn_gate_inp.bias' (expected shape [16])"),
    "no_expert_bias": (dict(skip={"blk.0.ffn_down_exps.bias"}),
                       "no tensor 'blk.0.ffn_down_exps.bias' (expected shape [64, 16])"),
    "no_window": (dict(skip={"sliding_window"}),
                  "a gpt-oss model needs gpt-oss.attention.sliding_window"),
    "no_expert_width": (dict(skip={"expert_feed_forward_length"}),
                        "a gpt-oss model needs gpt-oss.expert_feed_forward_length"),
    "no_output": (dict(skip={"output.weight"}), "a gpt-oss model needs its own 'output.weight'"),
}


def generate(path):
    return subprocess.run([BIN, "generate", "--model", path, "--prompt-tokens", "1,2,3",
                           "--max-tokens", "2", "--json"], capture_output=True, text=True)


@pytest.mark.parametrize("case", CASES)
def test_bad_gpt_oss_files_are_refused_naming_what_to_fix(tmp_path, case):
    kwargs, message = CASES[case]
    path = str(tmp_path / "bad.gguf")
    gpt_oss.write(path, **kwargs)
    result = generate(path)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert message in result.stderr, result.stderr


def test_the_good_file_runs(tmp_path):
    path = str(tmp_path / "good.gguf")
    gpt_oss.write(path)
    result = generate(path)
    assert result.returncode == 0, result.stderr


def test_info_gives_total_and_active_parameters(tmp_path):
    """`tokenmill info` counts gpt-oss's parameters as the other mixtures': every tensor's
    elements, and per token all but the unrouted experts' share of the *_exps tensors (their
    biases included), counted here from the gguf package's reading of the file."""
    import json

    import gguf
    path = str(tmp_path / "model.gguf")
    gpt_oss.write(path)
    tensors = gguf.GGUFReader(path).tensors
    total = sum(int(t.n_elements) for t in tensors)
    experts = sum(int(t.n_elements) for t in tensors if "_exps." in t.name)
    result = subprocess.run([BIN, "info", "--model", path], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    parameters = json.loads(result.stdout)["parameters"]
    assert parameters == {
        "total": total,
        "active_per_token": total - experts // gpt_oss.N_EXPERT * (gpt_oss.N_EXPERT -
                                                                    gpt_oss.N_USED),
        "experts": gpt_oss.N_EXPERT,
        "experts_per_token": gpt_oss.N_USED}
