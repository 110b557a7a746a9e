"""The tiny mistral3 (tests/reference/tiny_families/mistral3.py) is a golden for what it stands
for only if each of its settings acts within the positions its prompts reach: llama.cpp
(llama-cpp-python, one token at a time, YaRN betas from the file as make_tiny_family_golden.py
runs it) on the file without the attention temperature, without the YaRN betas or without the
log multiplier must give logits far from the golden's (> 1, where ours lie within 1e-3), and
without the temperature only from position 16 on, its first step."""
import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from tiny_families import mistral3  # noqa: E402

llama_cpp = pytest.importorskip("llama_cpp")
GOLDEN = os.path.join(os.environ.get("TOKENMILL_TEST_DATA_DIR",
                                     os.path.join(ROOT, "tests", "data")),
                      "logits", "tiny", "mistral3.json")


def llama_cpp_logits(path, tokens):
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=1, n_batch=1, n_ubatch=1,
                          logits_all=True, verbose=False, seed=0, yarn_beta_fast=-1.0,
                          yarn_beta_slow=-1.0)
    for token in tokens:
        llm.eval([token])
    return np.array(llm.scores[: llm.n_tokens], dtype=np.float32)


@pytest.mark.parametrize("off,first_row", [(dict(temperature=None), 16),
                                           (dict(beta_fast=None, beta_slow=None), 1),
                                           (dict(log_mul=None), 1)])
def test_each_setting_moves_llama_cpps_logits(tmp_path, off, first_row):
    with open(GOLDEN) as f:
        golden = json.load(f)["prompts"][0]
    want = np.array(golden["logits"], dtype=np.float32)
    path = str(tmp_path / "variant.gguf")
    mistral3.write(path, **off)
    moved = np.abs(llama_cpp_logits(path, golden["prompt_tokens"] + golden["continuation"]) -
                   want).max(axis=1)
    assert moved.max() > 1.0, f"without {off} llama.cpp's logits move by {moved.max():.3g} only"
    assert int(np.argmax(moved > 1e-3)) == first_row, moved[:20]
