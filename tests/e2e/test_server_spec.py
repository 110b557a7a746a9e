"""Speculative decoding end to end: tokenmill-server with --spec ngram and --spec draft gives
the tokens of `tokenmill generate` (plain decoding, another code path) and counts its drafts
in /metrics; a draft model with another vocabulary is refused at startup."""
import subprocess
from concurrent.futures import ThreadPoolExecutor

from server_harness import (DEFAULT_MODEL, EXIT_TIMEOUT_S, SERVER_BIN, TINY_MODEL, Server,
                            cli_generate, generate, pb2)

GROUNDED = [
    "Copy this list exactly.\nList: apples, bananas, cherries, dates, elderberries, figs, "
    "grapes.\nCopy: apples, bananas,",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat",
]
# Counter families tokenmill:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens.
SPEC_COUNTERS = ("tokenmill:spec_decode_num_drafts_total",
                 "tokenmill:spec_decode_num_draft_tokens_total",
                 "tokenmill:spec_decode_num_accepted_tokens_total")


def counters(server):
    samples = server.metrics()
    return {name: samples[name] for name in SPEC_COUNTERS}


def plain_tokens(prompt, max_tokens):
    """`tokenmill generate`'s tokens; it leaves out the end-of-generation token that
    finished the text, which the server streams."""
    return cli_generate(prompt, max_tokens)["tokens"]


def without_stop_token(ids, expected):
    return ids[:-1] if len(ids) == len(expected) + 1 else ids


def run_prompts(server, max_tokens):
    request = lambda p: pb2.GenerateRequest(text=p, max_tokens=max_tokens)  # noqa: E731
    with ThreadPoolExecutor(len(GROUNDED)) as pool:
        return list(pool.map(lambda p: generate(server.stub, request(p))[0], GROUNDED))


def assert_equal_to_plain(outputs, expected):
    for ids, plain in zip(outputs, expected):
        assert without_stop_token(ids, plain) == plain


def test_ngram_equals_plain_decoding_and_counts_drafts():
    max_tokens = 32
    expected = [plain_tokens(p, max_tokens) for p in GROUNDED]
    with Server("--spec", "ngram", "--spec-tokens", "4") as server:
        assert counters(server) == dict.fromkeys(SPEC_COUNTERS, 0.0)
        assert_equal_to_plain(run_prompts(server, max_tokens), expected)
        c = server.wait_for_metrics(lambda m: m["tokenmill:spec_decode_num_drafts_total"] > 0)
        c = {name: c[name] for name in SPEC_COUNTERS}
        drafts, draft_tokens, accepted = c.values()
        assert drafts <= draft_tokens <= 4 * drafts
        assert 0 < accepted <= draft_tokens
        assert "speculative decoding: ngram, up to 4 draft tokens" in server.log_text()


def test_target_as_draft_model_accepts_every_draft():
    max_tokens = 16
    expected = [plain_tokens(p, max_tokens) for p in GROUNDED]
    with Server("--spec", "draft", "--draft-model", DEFAULT_MODEL, "--spec-tokens", "3") as server:
        assert_equal_to_plain(run_prompts(server, max_tokens), expected)
        c = server.wait_for_metrics(lambda m: m["tokenmill:spec_decode_num_drafts_total"] > 0)
        assert c["tokenmill:spec_decode_num_accepted_tokens_total"] == \
            c["tokenmill:spec_decode_num_draft_tokens_total"] > 0


def test_draft_model_with_another_vocabulary_is_refused():
    result = subprocess.run(
        [str(SERVER_BIN), "--model", str(DEFAULT_MODEL), "--port", "0", "--metrics-port", "-1",
         "--spec", "draft", "--draft-model", str(TINY_MODEL)],
        capture_output=True, text=True, timeout=EXIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert "different vocabularies" in result.stderr
    assert "give --draft-model a model with the target's tokenizer" in result.stderr
