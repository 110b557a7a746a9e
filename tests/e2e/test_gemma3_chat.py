"""Gemma 3 270M Q4_K_M through tokenmill-server and the gateway with Gemma's chat template: 16
chats at once (tests/data/logits/gemma-3-270m-q4_k_m.chat.json, written by
tests/reference/make_gemma3_chat_golden.py from llama.cpp) with prefix caching on (their long
shared first turn), chunked prefill (32 tokens a step) and a KV cache small enough that
requests are preempted, each greedy reply equal to llama.cpp's except where it leaves
llama.cpp's at a near-tie of llama.cpp's own (top-2 gap below NEAR_TIE at the token where the
texts part), which are counted and reported."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import MODELS_DIR, REPO, Server

MODEL = MODELS_DIR / "gemma-3-270m-q4_k_m.gguf"
GOLDEN = REPO / "tests" / "data" / "logits" / "gemma-3-270m-q4_k_m.chat.json"
# A reply may part from llama.cpp's where llama.cpp's top-2 gap is below NEAR_TIE. The server's
# regrouped weights sum in orders of their own (Q8_0 rows 16 at a time, the K-quants'
# sub-blocks), which move Gemma's logits as far as llama.cpp's own AVX2 and AVX-512 builds move
# them from each other: 0.88 at the 99th percentile of |logit difference| (docs/fidelity.md). The
# AVX-512 build parts from 7 of these 16 replies, at gaps up to 0.37
# (tests/reference/llama_cpp_departures.py); tokenmill from 7 on 2026-12-04, at gaps up to 0.76.
NEAR_TIE = 0.9
MIN_EQUAL = 9  # replies equal to llama.cpp's: both keep 9 of 16

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} missing: run scripts/setup")


@pytest.fixture(scope="module")
def server():
    # 12 MiB of f16 KV: ~650 tokens of Gemma 3 270M's 18 layers (its 512-token window holds
    # these whole chats), a third of what 16 chats hold.
    with Server("--chat-template", REPO / "tests" / "data" / "chat_templates" / "gemma.jinja",
                "--max-num-batched-tokens", "32", "--kv-cache-memory", "12MiB",
                "--threads", "2", model=MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def gateway(server):
    with Gateway(backend_address(server)) as g:
        yield g


def test_sixteen_chats_at_once_equal_llama_cpp(server, gateway):
    golden = json.loads(GOLDEN.read_text())
    client = gateway.client()
    model = model_name(gateway)

    def chat(c):
        r = client.chat.completions.create(model=model, messages=c["messages"], temperature=0,
                                           max_tokens=golden["max_tokens"])
        return r.choices[0].message.content, r.choices[0].finish_reason

    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(chat, golden["chats"]))
    exempt = []
    for c, (text, finish) in zip(golden["chats"], replies):
        if text == c["reply"]:
            assert finish == ("stop" if c["finished"] else "length"), c["messages"][-1]
            continue
        # The first reply token after which llama.cpp's text is no longer a prefix of ours.
        step = next(i for i, t in enumerate(c["text_after"]) if not text.startswith(t))
        gap = c["top2_gaps"][step]
        assert gap < NEAR_TIE, (
            f"{c['messages'][-1]['content']!r} parts from llama.cpp at reply token {step}, "
            f"where llama.cpp's top-2 gap is {gap:.3f}: ours {text!r}, llama.cpp {c['reply']!r}")
        exempt.append((step, round(gap, 3)))
    print(f"{len(replies) - len(exempt)} of {len(replies)} replies equal llama.cpp's; "
          f"near-tie exemptions (reply token, llama.cpp's gap): {exempt}")
    assert len(replies) - len(exempt) >= MIN_EQUAL
    metrics = server.metrics()
    assert metrics["tokenmill:prefix_cache_hits_total"] > 0
    assert metrics["tokenmill:num_preemptions_total"] > 0
