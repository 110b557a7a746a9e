"""The tiny random models of tests/reference/tiny_families/ on --device cuda (label gpu; skipped
where this build has no CUDA backend or the machine no GPU): a family the CUDA pass runs gives
llama.cpp's greedy continuation (tests/data/logits/tiny/<name>.json) up to the first step where
llama.cpp's own top-2 gap is under NEAR_TIE (the CUDA kernels round differently from the CPU's,
which follow llama.cpp's); a family it does not run is refused at load, by name."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import tiny_families  # noqa: E402

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
GOLDEN_DIR = os.path.join(os.environ.get("TOKENMILL_TEST_DATA_DIR",
                                         os.path.join(ROOT, "tests", "data")), "logits", "tiny")
NEAR_TIE = 0.01


@pytest.mark.parametrize("name", tiny_families.FAMILIES)
def test_cuda_gives_llama_cpp_greedy_tokens_or_refuses_by_name(tmp_path, name):
    with open(os.path.join(GOLDEN_DIR, name + ".json")) as f:
        golden = json.load(f)
    model = str(tmp_path / (name + ".gguf"))
    tiny_families.family(name).write(model)
    for p in golden["prompts"]:
        result = subprocess.run(
            [BIN, "generate", "--model", model, "--device", "cuda", "--json", "--ignore-eos",
             "--prompt-tokens", ",".join(map(str, p["prompt_tokens"])),
             "--max-tokens", str(len(p["continuation"]))], capture_output=True, text=True)
        if "no CUDA backend" in result.stderr or "no usable CUDA device" in result.stderr:
            pytest.skip("no CUDA here: " + result.stderr.strip())
        if result.returncode != 0:
            assert f"'{golden['arch']}'" in result.stderr, result.stderr
            assert "use --device cpu" in result.stderr, result.stderr
            return
        ours = json.loads(result.stdout)["tokens"]
        want = p["continuation"]
        logits = np.array(p["logits"], dtype=np.float32)[len(p["prompt_tokens"]) - 1:]
        top2 = np.sort(logits, axis=-1)[:, -2:]
        differ = [k for k in range(len(want)) if ours[k] != want[k]]
        if differ:
            k = differ[0]
            gap = float(top2[k, 1] - top2[k, 0])
            assert gap < NEAR_TIE, (
                f"{name}: step {k} gives {ours[k]}, llama.cpp {want[k]} (top-2 gap {gap:.4f})")
