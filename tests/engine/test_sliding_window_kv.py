"""KV groups end to end: the tiny gemma2 and gemma3 models of tests/reference/tiny_families/
(sliding-window layers, windows of 4 and 8 tokens, prompts that cross them) through the
engine's loop (sliding_window_runner: Scheduler, KvCacheManager, ModelRunner on the CPU).
Whatever the layout and the schedule (group 1 releasing what lies before its window, chunked
prefills across the window edge, prefix-cache hits, preemption, an abort), the greedy tokens
are those of every layer allocated in full, which are llama.cpp's (the family's golden,
tests/data/logits/tiny/<name>.json, made by make_tiny_family_golden.py) except at its own
near-ties; no block is in use at the end."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import tiny_families  # noqa: E402

TOOL = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "sliding_window_runner")
GOLDEN_DIR = os.path.join(os.environ.get("TOKENMILL_TEST_DATA_DIR",
                                         os.path.join(ROOT, "tests", "data")), "logits", "tiny")
NEAR_TIE = 2e-3  # as test_tiny_families.py: 2 x its logit bound


@pytest.mark.parametrize("name", ["gemma2", "gemma3", "gemma3n", "gemma4"])
def test_every_kv_layout_and_schedule_gives_the_full_allocation_tokens(tmp_path, name):
    with open(os.path.join(GOLDEN_DIR, name + ".json")) as f:
        golden = json.load(f)
    model = str(tmp_path / (name + ".gguf"))
    tiny_families.family(name).write(model)
    prompts = [p["prompt_tokens"] for p in golden["prompts"]]
    max_tokens = len(golden["prompts"][0]["continuation"])
    result = subprocess.run(
        [TOOL, model, ";".join(",".join(map(str, p)) for p in prompts), str(max_tokens)],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)

    reference = runs["one_pool"]["tokens"]
    for i, p in enumerate(golden["prompts"]):
        logits = np.array(p["logits"], dtype=np.float32)
        n_prompt = len(p["prompt_tokens"])
        differ = [k for k, (ours, theirs) in enumerate(zip(reference[i], p["continuation"]))
                  if ours != theirs]
        if differ:  # from the first difference on the contexts differ: only a near-tie may
            top2 = np.sort(logits[n_prompt - 1 + differ[0]])[-2:]
            assert top2[1] - top2[0] < NEAR_TIE, (
                f"{name} prompt {i}: token {differ[0]} differs from llama.cpp's, not a near-tie")
    for layout in ["groups", "groups_chunked", "groups_tight"]:
        run = runs[layout]
        tokens = run["tokens"]
        # Requests past len(prompts) are the second pass over the same prompts.
        for i, got in enumerate(tokens):
            assert got == reference[i % len(prompts)], f"{name} {layout}: request {i}"
        assert run["released_blocks"] > 0, f"{name} {layout} released nothing"
        assert run["blocks_in_use_after"] == 0, f"{name} {layout} leaked blocks"
    assert runs["groups_chunked"]["prefix_hit_tokens"] > 0
    assert runs["groups_tight"]["preemptions"] > 0
    assert runs["one_pool"]["released_blocks"] == 0
