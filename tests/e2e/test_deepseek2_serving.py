"""DeepSeek's multi-head latent attention through tokenmill-server: the tiny random deepseek2 of
tests/reference/tiny_families/deepseek2.py (DeepSeek-V3's shape: query LoRA, YaRN, a leading
dense layer, sigmoid routing with its selection bias over 4 groups, 2 shared experts) with the
real SentencePiece vocabulary of stories260K, so the server tokenizes. The startup log states
the latent cache (K alone: layers x (latent + rope) x 2 B); 16 concurrent greedy streams, whose
tokens share every step's attention and expert groups, each equal the same request run alone;
the lone runs equal llama.cpp's greedy continuation (llama-cpp-python fed one token at a time)
up to a near-tie of its own; a repeated prompt is served from the prefix cache with the same
tokens; int8 KV takes the latent rows; no block is left in use; `tokenmill info` counts the
latent row alone."""
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from llama_reference import llama_cpp_greedy
from server_harness import (CLI_BIN, EXIT_TIMEOUT_S, REPO, SERVER_BIN, TINY_MODEL, Server,
                            generate, pb2)

sys.path.insert(0, str(REPO / "tests" / "reference"))
from tiny_families import deepseek2  # noqa: E402

MAX_TOKENS = 12
NEAR_TIE = 2e-3
PROMPTS = [[int(t) for t in np.random.default_rng(60 + i).integers(3, 512, 5 + 2 * i)]
           for i in range(16)]
LATENT_ROW = deepseek2.KV_LORA + deepseek2.QK_ROPE


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not TINY_MODEL.exists():
        pytest.skip(f"{TINY_MODEL} is missing: run scripts/setup")
    path = tmp_path_factory.mktemp("deepseek2") / "tiny-deepseek2.gguf"
    deepseek2.write(str(path), vocabulary_from=str(TINY_MODEL))
    return path


def request(i, tag="ds"):
    return pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=PROMPTS[i]), max_tokens=MAX_TOKENS,
                               ignore_eos=True, request_id=f"{tag}{i}")


def kv_line(log):
    line = next((l for l in log.splitlines() if "KV cache:" in l), None)
    assert line is not None, log
    return line


def test_sixteen_concurrent_streams_equal_their_lone_runs_and_llama_cpp(model):
    with Server(model=model, metrics=True) as server:
        line = kv_line(server.log_text())
        # The latent row alone, no V: 3 layers x (40 latent + 16 rope) x 2 B = 336 B a token.
        assert f"{deepseek2.N_LAYER * LATENT_ROW * 2} B/token" in line, line
        assert (f"{deepseek2.N_LAYER} layers x ({deepseek2.KV_LORA} latent + "
                f"{deepseek2.QK_ROPE} rope) x 2 B") in line, line
        lone = [generate(server.stub, request(i))[0] for i in range(16)]
        with ThreadPoolExecutor(max_workers=16) as pool:
            together = list(pool.map(lambda i: generate(server.stub, request(i, "t"))[0],
                                     range(16)))
        for i in range(16):
            assert len(lone[i]) == MAX_TOKENS
            assert together[i] == lone[i], f"stream {i} differs from its lone run"
        samples = server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 0)
        assert samples["tokenmill:kv_cache_blocks_in_use"] == 0
        assert samples["tokenmill:prefix_cache_hits_total"] > 0  # the second pass's prompts
    for i in range(0, 16, 5):
        want, gaps = llama_cpp_greedy(model, PROMPTS[i], MAX_TOKENS)
        differ = [k for k in range(MAX_TOKENS) if lone[i][k] != want[k]]
        if differ:  # after a first difference the contexts differ: only a near-tie may
            assert gaps[differ[0]] < NEAR_TIE, (
                f"prompt {i}: step {differ[0]} gives {lone[i][differ[0]]}, llama.cpp "
                f"{want[differ[0]]} (top-2 gap {gaps[differ[0]]:.4f})")


def test_int8_kv_keeps_one_latent_row_with_its_scale(model):
    with Server("--kv-cache-dtype", "int8", model=model) as server:
        line = kv_line(server.log_text())
        # 3 layers x (56 x 1 B + a 4 B scale).
        assert f"{deepseek2.N_LAYER * (LATENT_ROW + 4)} B/token" in line, line
        tokens = generate(server.stub, request(3))[0]
        assert len(tokens) == MAX_TOKENS


def test_a_separate_value_type_is_refused_naming_the_flag(model):
    result = subprocess.run(
        [str(SERVER_BIN), "--model", str(model), "--port", "0", "--metrics-port", "-1",
         "--kv-cache-dtype", "int8", "--kv-cache-dtype-v", "f16"],
        capture_output=True, text=True, timeout=EXIT_TIMEOUT_S)
    assert result.returncode != 0
    assert re.search(r"--kv-cache-dtype-v: .*latent", result.stderr), result.stderr


def test_info_counts_the_latent_row_alone(model):
    result = subprocess.run([str(CLI_BIN), "info", "--model", str(model)], capture_output=True,
                            text=True, timeout=EXIT_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    kv = json.loads(result.stdout)["kv_cache"]
    # 3 layers x 56 x 2 B, where the 4 heads' K (44 each) and V (20 each) would take 4.6 times
    # as much.
    assert kv["bytes_per_token_f16"] == deepseek2.N_LAYER * LATENT_ROW * 2
    assert kv["storing_layers"] == deepseek2.N_LAYER
