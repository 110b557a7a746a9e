"""Every tiny random model of tests/reference/tiny_families/ (one per family or variant)
against llama.cpp's golden (tests/data/logits/tiny/<name>.json, written by
tests/reference/make_tiny_family_golden.py): the GGUF is written again from its module and must
be the file the golden ran (sha256); then on every ISA, fed one token at a time, in prefill
chunks and in chunks batched with another sequence (tiny_family_logits), our logits after every
token of prompt + llama.cpp's greedy continuation must lie within LOGIT_BOUND of llama.cpp's,
our greedy token must equal llama.cpp's at every step except where llama.cpp's own top-2 gap is
below 2 * LOGIT_BOUND (a near-tie that logits within the bound may flip), which are counted and
reported, and the three ways of feeding must give the same logits bit for bit (batch
invariance, chunked = whole, and a chunk on cached KV, as after a prefix hit, = no hit).
A module may set a LOGIT_BOUND of its own, saying why (a quantized variant whose matrices run
in the CPU's regrouped layout, which sums in another order than ggml)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import tiny_families  # noqa: E402
from tiny_families.common import VOCAB, sha256  # noqa: E402

TOOL = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tiny_family_logits")
GOLDEN_DIR = os.path.join(os.environ.get("TOKENMILL_TEST_DATA_DIR",
                                         os.path.join(ROOT, "tests", "data")), "logits", "tiny")
# Largest |ours - llama.cpp| of any logit (logits of std 3 to 9, F32 weights, f16 KV): measured
# 5.7e-6 for every family, the golden's rounding to 5 decimals (each op computed as llama.cpp
# does); the margin is for f32 matmuls summed in other orders on other CPUs.
LOGIT_BOUND = 1e-3


@pytest.mark.parametrize("name", tiny_families.FAMILIES)
def test_logits_and_greedy_tokens_match_llama_cpp(tmp_path, name):
    golden_path = os.path.join(GOLDEN_DIR, name + ".json")
    assert os.path.exists(golden_path), (
        f"{golden_path} is missing: run tests/reference/make_tiny_family_golden.py {name}")
    with open(golden_path) as f:
        golden = json.load(f)
    model = str(tmp_path / (name + ".gguf"))
    module = tiny_families.family(name)
    module.write(model)
    assert sha256(model) == golden["sha256"], (
        f"tiny_families/{name}.py no longer writes the file the golden ran: rerun "
        f"tests/reference/make_tiny_family_golden.py {name}")
    bound = getattr(tiny_families.family(name), "LOGIT_BOUND", LOGIT_BOUND)
    report = []
    for i, p in enumerate(golden["prompts"]):
        tokens = p["prompt_tokens"] + p["continuation"]
        want = np.array(p["logits"], dtype=np.float32)
        out = tmp_path / f"prompt{i}"
        out.mkdir()
        context = [str(module.N_CTX)] if hasattr(module, "N_CTX") else []
        result = subprocess.run([TOOL, model, ",".join(map(str, tokens)), str(out), *context],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        runs = sorted(os.listdir(out))
        assert any(r.startswith("scalar-") for r in runs), runs
        top2 = np.sort(want, axis=-1)[:, -2:]
        near_tie = top2[:, 1] - top2[:, 0] < 2 * bound
        n_prompt = len(p["prompt_tokens"])
        # Row n_prompt - 1 + k predicts continuation token k.
        chosen = np.array(p["continuation"])
        for isa in {r.split("-")[0] for r in runs}:
            decode = np.fromfile(out / f"{isa}-decode.f32", dtype=np.float32)
            for mode in ["chunked", "batched"]:
                other = np.fromfile(out / f"{isa}-{mode}.f32", dtype=np.float32)
                assert np.array_equal(decode, other), (
                    f"{name} prompt {i} {isa}: {mode} logits differ from one token at a time "
                    f"by up to {float(np.abs(decode - other).max()):.3g}")
        for run in runs:
            ours = np.fromfile(out / run, dtype=np.float32).reshape(-1, VOCAB)
            assert ours.shape == want.shape, run
            err = float(np.abs(ours - want).max())
            assert err <= bound, (
                f"{name} prompt {i} {run}: logits {err:.4g} from llama.cpp's (bound "
                f"{bound}), first at row {int(np.abs(ours - want).max(axis=1).argmax())}")
            steps = slice(n_prompt - 1, n_prompt - 1 + len(chosen))
            differ = np.argmax(ours[steps], axis=-1) != chosen
            exempt = int((differ & near_tie[steps]).sum())
            assert not (differ & ~near_tie[steps]).any(), (
                f"{name} prompt {i} {run}: greedy tokens differ from llama.cpp's at steps "
                f"{np.nonzero(differ & ~near_tie[steps])[0].tolist()}, not at near-ties")
            report.append(f"{run} prompt {i}: max |diff| {err:.2e}, "
                          f"{'identical' if not differ.any() else f'{exempt} near-tie steps differ'}")
    print(f"\n{name} ({golden['arch']}):\n  " + "\n  ".join(report))
