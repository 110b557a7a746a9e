"""mistral3 files tokenmill cannot run as llama.cpp would are refused at load with an error
naming the key or the tensor to fix (never a crash): RoPE over part of the heads (llama.cpp
asserts n_rot = head_dim), an attention temperature without YaRN's original context (llama.cpp
throws "invalid n_ctx_orig_yarn"), experts and feed-forward biases (llama.cpp runs them,
tokenmill's mistral3 does not), YaRN or temperature keys that are not finite numbers. The files
are the tiny mistral3 of tests/reference/tiny_families/mistral3.py with one thing wrong; the good
one gives llama.cpp's greedy tokens through `tokenmill generate`, the file without its
temperature key does not (the family reads it)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from tiny_families import mistral3  # noqa: E402

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
GOLDEN_DIR = os.path.join(os.environ.get("TOKENMILL_TEST_DATA_DIR",
                                         os.path.join(ROOT, "tests", "data")), "logits", "tiny")

CASES = {
    "partial_rope": (dict(rope_dim=16),
                     "mistral3.rope.dimension_count (16) differs from the head size (32)"),
    "temperature_without_context": (
        dict(original_context=0),
        "mistral3.attention.temperature_scale needs a positive "
        "mistral3.rope.scaling.original_context_length"),
    "experts": (dict(n_expert=4),
                "mistral3.expert_count is 4: tokenmill runs dense mistral3 models only"),
    "ffn_bias": (dict(extra=["blk.1.ffn_up.bias"]),
                 "tensor 'blk.1.ffn_up.bias': tokenmill runs mistral3 feed-forwards without "
                 "biases"),
    "nan_beta": (dict(beta_fast=float("nan")),
                 "mistral3.rope.scaling.yarn_beta_fast must be a finite number"),
    "infinite_temperature": (dict(temperature=float("inf")),
                             "mistral3.attention.temperature_scale must be a finite number"),
}


def generate(path):
    return subprocess.run([BIN, "generate", "--model", path, "--prompt-tokens", "1,2,3",
                           "--max-tokens", "2", "--json"], capture_output=True, text=True)


@pytest.mark.parametrize("case", CASES)
def test_bad_mistral3_files_are_refused_naming_what_to_fix(tmp_path, case):
    kwargs, message = CASES[case]
    path = str(tmp_path / "bad.gguf")
    mistral3.write(path, **kwargs)
    result = generate(path)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert message in result.stderr, result.stderr


def test_the_good_file_gives_llama_cpps_tokens_and_reads_its_temperature(tmp_path):
    """Through `tokenmill generate`, the good file continues the golden's first prompt (40
    tokens, positions past two of the temperature's steps) with llama.cpp's greedy tokens; the
    same file without attention.temperature_scale does not (llama.cpp's logits move by > 10
    from position 16 without it)."""
    with open(os.path.join(GOLDEN_DIR, "mistral3.json")) as f:
        golden = json.load(f)["prompts"][0]
    tokens = ",".join(map(str, golden["prompt_tokens"]))
    n = len(golden["continuation"])
    continuations = []
    for name, kwargs in [("good", {}), ("cold", dict(temperature=None))]:
        path = str(tmp_path / f"{name}.gguf")
        mistral3.write(path, **kwargs)
        result = subprocess.run([BIN, "generate", "--model", path, "--prompt-tokens", tokens,
                                 "--max-tokens", str(n), "--ignore-eos", "--json"],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        continuations.append(json.loads(result.stdout)["tokens"])
    assert continuations[0] == golden["continuation"]
    assert continuations[1] != golden["continuation"]
