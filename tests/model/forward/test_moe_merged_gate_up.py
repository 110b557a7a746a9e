"""Experts stored as one merged ffn_gate_up_exps tensor (gate rows first, as llama.cpp's
build_moe_ffn splits it) compute what the separate ffn_gate_exps and ffn_up_exps do: the tiny
qwen3moe (tests/reference/tiny_families/qwen3moe.py) rewritten with each layer's gate and up
experts concatenated must give, on every ISA, the logits of llama.cpp's golden for the
separate file (tests/data/logits/tiny/qwen3moe.json) within test_tiny_families.py's bound, and
the separate file's own logits bit for bit."""
import json
import os
import subprocess
import sys

import numpy as np
import gguf

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import tiny_families  # noqa: E402
from tiny_families.common import VOCAB  # noqa: E402

TOOL = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tiny_family_logits")
GOLDEN = os.path.join(os.environ.get("TOKENMILL_TEST_DATA_DIR",
                                     os.path.join(ROOT, "tests", "data")),
                      "logits", "tiny", "qwen3moe.json")
LOGIT_BOUND = 1e-3


def write_merged(separate, merged):
    """`separate`'s tensors and keys, each layer's gate and up experts as one tensor."""
    reader = gguf.GGUFReader(separate)
    writer = gguf.GGUFWriter(merged, "qwen3moe")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    for name, data in tensors.items():
        if name.endswith("ffn_up_exps.weight"):
            continue
        if name.endswith("ffn_gate_exps.weight"):
            up = tensors[name.replace("ffn_gate_exps", "ffn_up_exps")]
            writer.add_tensor(name.replace("ffn_gate_exps", "ffn_gate_up_exps"),
                              np.concatenate([data, up], axis=1))
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def logits(model, tokens, out):
    out.mkdir()
    result = subprocess.run([TOOL, model, ",".join(map(str, tokens)), str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return {run: np.fromfile(out / run, dtype=np.float32).reshape(-1, VOCAB)
            for run in sorted(os.listdir(out))}


def test_merged_gate_up_experts_equal_separate_ones_and_llama_cpp(tmp_path):
    with open(GOLDEN) as f:
        golden = json.load(f)
    separate = str(tmp_path / "separate.gguf")
    merged = str(tmp_path / "merged.gguf")
    tiny_families.family("qwen3moe").write(separate)
    write_merged(separate, merged)
    names = {t.name for t in gguf.GGUFReader(merged).tensors}
    assert "blk.0.ffn_gate_up_exps.weight" in names and "blk.0.ffn_up_exps.weight" not in names
    p = golden["prompts"][0]
    tokens = p["prompt_tokens"] + p["continuation"]
    want = np.array(p["logits"], dtype=np.float32)
    ours = logits(merged, tokens, tmp_path / "merged")
    theirs = logits(separate, tokens, tmp_path / "separate")
    assert ours.keys() == theirs.keys()
    for run, got in ours.items():
        assert np.array_equal(got, theirs[run]), run
        assert float(np.abs(got - want).max()) <= LOGIT_BOUND, run
