"""A mixture-of-experts model through tokenmill-server: a tiny random qwen3moe (16 experts,
top-4, F32) with the real SentencePiece vocabulary of stories260K, so the server tokenizes.
16 concurrent greedy streams, whose tokens share every decode step's expert groups, must each
equal the same request run alone (batch invariance of the grouped expert matmuls), and the lone
runs must equal llama.cpp's greedy continuation (llama-cpp-python fed one token at a time) up
to a near-tie of its own. The startup log states the total and active parameters."""
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from llama_reference import llama_cpp_greedy
from server_harness import REPO, TINY_MODEL, Server, generate, pb2

sys.path.insert(0, str(REPO / "tests" / "reference"))
from tiny_families import qwen3moe  # noqa: E402
from tiny_families.common import TinyWriter  # noqa: E402

N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_LAYER = 64, 4, 2, 16, 2
N_EXPERT, N_USED, N_FF_EXP = 16, 4, 32
MAX_TOKENS = 12
NEAR_TIE = 2e-3
PROMPTS = [[int(t) for t in np.random.default_rng(40 + i).integers(3, 512, 5 + i)]
           for i in range(16)]


def write_model(path):
    w = TinyWriter(path, "qwen3moe", seed=41, vocabulary_from=str(TINY_MODEL))
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF_EXP * N_USED, n_head=N_HEAD,
              n_kv=N_KV, head_dim=HEAD_DIM)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    qwen3moe.tensors(w, N_LAYER, N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_EXPERT, N_FF_EXP)
    w.close()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not TINY_MODEL.exists():
        pytest.skip(f"{TINY_MODEL} is missing: run scripts/setup")
    path = tmp_path_factory.mktemp("moe") / "tiny-qwen3moe.gguf"
    write_model(str(path))
    return path


def request(i):
    return pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=PROMPTS[i]), max_tokens=MAX_TOKENS,
                               ignore_eos=True, request_id=f"moe{i}")


def test_sixteen_concurrent_streams_equal_their_lone_runs_and_llama_cpp(model):
    with Server(model=model, metrics=True) as server:
        log = server.log_text()
        assert "active per token (4 of 16 experts per token)" in log, log
        lone = [generate(server.stub, request(i))[0] for i in range(16)]
        with ThreadPoolExecutor(max_workers=16) as pool:
            together = list(pool.map(lambda i: generate(server.stub, request(i))[0], range(16)))
        for i in range(16):
            assert len(lone[i]) == MAX_TOKENS
            assert together[i] == lone[i], f"stream {i} differs from its lone run"
        samples = server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 0)
        assert samples["tokenmill:kv_cache_blocks_in_use"] == 0
    for i in range(0, 16, 5):
        want, gaps = llama_cpp_greedy(model, PROMPTS[i], MAX_TOKENS)
        differ = [k for k in range(MAX_TOKENS) if lone[i][k] != want[k]]
        if differ:  # after a first difference the contexts differ: only a near-tie may
            assert gaps[differ[0]] < NEAR_TIE, (
                f"prompt {i}: step {differ[0]} gives {lone[i][differ[0]]}, llama.cpp "
                f"{want[differ[0]]} (top-2 gap {gaps[differ[0]]:.4f})")
