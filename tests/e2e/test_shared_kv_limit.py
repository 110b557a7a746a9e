"""Several models share one KV limit (--kv-cache-memory on the CPU; cache/kv_memory_budget.h,
engine/elastic_kv.h): one model's cached prompts grow its pool into all of the limit, and a
request of another model that cannot run takes blocks back (their pages returned); both answer
as a server without the limit does, a draft model's KV counts in its model's part, a
sliding-window model's two pools both take their blocks from it, and the pools together never
hold more than the limit (tokenmill:kv_cache_memory_bytes)."""
import random
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_harness import DEFAULT_MODEL, REPO, TINY_MODEL, Server, generate
from test_multi_model import DEFAULT_ID, MiB, PROMPTS, SMOL_PROMPTS, TINY_ID, request

sys.path.insert(0, str(REPO / "tests" / "reference"))
from tiny_families import gemma3  # noqa: E402


@pytest.fixture(scope="module")
def lone():
    """{(model, prompt): greedy tokens} of each model and prompt run alone, without a tight
    limit."""
    if not DEFAULT_MODEL.exists() or not TINY_MODEL.exists():
        pytest.skip(f"{DEFAULT_MODEL} or {TINY_MODEL} is missing: run scripts/setup")
    with Server("--model", TINY_MODEL, model=DEFAULT_MODEL) as server:
        return {(name, tuple(p)): generate(server.stub, request(p, name))[0]
                for name in (DEFAULT_ID, TINY_ID) for p in PROMPTS[name]}


def kv_memory(server):
    """{model: bytes of the shared KV limit its pool holds} (tokenmill:kv_cache_memory_bytes)."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {s.labels["model_name"]: s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "tokenmill:kv_cache_memory_bytes"}


SHARED_KV_MIB = 2  # SmolLM2: 5 blocks of 16 tokens; stories260K (128-token context): 204
SMOL_BLOCK_BYTES = 16 * 30 * 3 * 64 * 2 * 2  # 16 tokens x layers x KV heads x head dim x K,V x f16


def test_the_models_pools_grow_and_shrink_within_one_kv_limit(lone):
    """Two models share --kv-cache-memory: stories260K's cached prompts take all of it, then a
    request of SmolLM2 makes stories260K give cached blocks back; both answer as they do alone,
    and their pools together never hold more than the limit."""
    limit = SHARED_KV_MIB * MiB
    rng = random.Random(0)
    fill = [[1] + [rng.randrange(3, 512) for _ in range(115)] for _ in range(30)]
    with Server("--model", TINY_MODEL, "--kv-cache-memory", f"{SHARED_KV_MIB}MiB",
                model=DEFAULT_MODEL) as server:
        assert kv_memory(server) == {DEFAULT_ID: 0}  # stories260K loads on first use
        filled = [generate(server.stub, request(p, TINY_ID, max_tokens=4))[0] for p in fill]
        held = kv_memory(server)
        # Grown into the whole limit rather than evict its own cache: no room is left for a
        # block of SmolLM2's.
        assert held[DEFAULT_ID] == 0
        assert limit - SMOL_BLOCK_BYTES < held[TINY_ID] <= limit, held

        for prompt in SMOL_PROMPTS:
            assert generate(server.stub, request(prompt, DEFAULT_ID))[0] == \
                lone[(DEFAULT_ID, tuple(prompt))]
        after = kv_memory(server)
        assert after[DEFAULT_ID] >= SMOL_BLOCK_BYTES, after
        assert after[TINY_ID] < held[TINY_ID], after
        assert sum(after.values()) <= limit, after

        # Both at once, back and forth: every answer as alone, every filler prompt again.
        jobs = [(name, p) for name in (DEFAULT_ID, TINY_ID) for p in PROMPTS[name]] * 3
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            together = list(pool.map(
                lambda job: generate(server.stub, request(job[1], job[0]))[0], jobs))
            again = list(pool.map(
                lambda p: generate(server.stub, request(p, TINY_ID, max_tokens=4))[0], fill))
        for (name, p), got in zip(jobs, together):
            assert got == lone[(name, tuple(p))], f"model {name!r} differs under the shared limit"
        assert again == filled
        assert sum(kv_memory(server).values()) <= limit


def test_a_draft_models_kv_counts_in_the_shared_limit(lone):
    """SmolLM2 drafting with itself: each of its blocks takes the draft's KV too, and it still
    takes room from stories260K's cache and answers as it does alone."""
    limit = 2 * SHARED_KV_MIB * MiB
    rng = random.Random(1)
    fill = [[1] + [rng.randrange(3, 512) for _ in range(115)] for _ in range(60)]
    with Server("--model", TINY_MODEL, "--kv-cache-memory", f"{2 * SHARED_KV_MIB}MiB",
                "--spec", "draft", "--draft-model", DEFAULT_MODEL, "--spec-tokens", "3",
                model=DEFAULT_MODEL) as server:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda p: generate(server.stub, request(p, TINY_ID, max_tokens=1)),
                          fill))
        assert kv_memory(server)[TINY_ID] > limit - 2 * SMOL_BLOCK_BYTES
        for prompt in SMOL_PROMPTS:
            assert generate(server.stub, request(prompt, DEFAULT_ID))[0] == \
                lone[(DEFAULT_ID, tuple(prompt))]
        held = kv_memory(server)
        assert held[DEFAULT_ID] > 0 and held[DEFAULT_ID] % (2 * SMOL_BLOCK_BYTES) == 0, held
        assert sum(held.values()) <= limit, held


def test_a_sliding_window_models_two_pools_take_from_the_limit_too(tmp_path):
    """The tiny gemma3 (window 8: its sliding-window layers in a pool of their own) beside
    stories260K (its vocabulary): stories260K's cached prompts take the limit, then gemma3's
    prompts, which cross the window, take blocks back for both of its pools and answer as
    gemma3 alone does."""
    gemma = tmp_path / "tiny-gemma3.gguf"
    gemma3.write(str(gemma), vocabulary_from=str(TINY_MODEL))
    flags = ("--block-size", "4", "--max-num-batched-tokens", "12")
    rng = random.Random(2)
    prompts = [[1] + [rng.randrange(3, 512) for _ in range(60)] for _ in range(3)]
    with Server(*flags, model=gemma) as alone:
        want = [generate(alone.stub, request(p, ""))[0] for p in prompts]
    limit_kib = 128
    with Server("--model", f"stories={TINY_MODEL}", *flags, "--kv-cache-memory",
                f"{limit_kib}KiB", model=f"gemma={gemma}") as server:
        for p in [[1] + [rng.randrange(3, 512) for _ in range(60)] for _ in range(4)]:
            generate(server.stub, request(p, "stories", max_tokens=1))
        before = kv_memory(server)
        assert before["stories"] > limit_kib * 1024 * 3 / 4, before
        got = [generate(server.stub, request(p, "gemma"))[0] for p in prompts]
        assert got == want
        after = kv_memory(server)
        assert after["gemma"] > 0 and after["stories"] < before["stories"], (before, after)
        assert sum(after.values()) <= limit_kib * 1024
