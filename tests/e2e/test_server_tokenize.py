"""Tokenize, Detokenize and GetModelInfo against independent references: llama.cpp's token
ids (the golden files of tests/data/tokenizer) and the GGUF metadata read by the gguf
package; and what the /metrics endpoint answers."""
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from gguf import GGUFReader

from server_harness import DEFAULT_MODEL, RPC_TIMEOUT_S, TINY_MODEL, Server, pb2

DATA = Path(os.environ.get("TOKENMILL_TEST_DATA_DIR",
                           Path(__file__).resolve().parents[1] / "data"))


@pytest.fixture(scope="module", params=[DEFAULT_MODEL, TINY_MODEL], ids=lambda p: p.stem)
def served(request):
    with Server(model=request.param) as server:
        yield request.param, server


def golden_cases(model, count=60):
    with open(DATA / "tokenizer" / (model.stem + ".json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    return cases[:: max(1, len(cases) // count)]


def test_tokenize_matches_llama_cpp(served):
    model, server = served
    for case in golden_cases(model):
        for parse_special, expected in [(False, case["ids"]), (True, case["ids_special"])]:
            got = server.stub.Tokenize(pb2.TokenizeRequest(text=case["text"],
                                                           parse_special=parse_special),
                                       timeout=RPC_TIMEOUT_S)
            assert list(got.token_ids) == expected, (case["text"], parse_special)
            assert got.prompt == case["text"]


def test_detokenize_inverts_byte_level_bpe():
    # Byte-level BPE is lossless: llama.cpp's ids decode back to exactly the text.
    with Server(metrics=False) as server:
        for case in golden_cases(DEFAULT_MODEL):
            got = server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=case["ids"]),
                                         timeout=RPC_TIMEOUT_S)
            assert got.text == case["text"]
        markup = "<|im_start|>user\nHi<|im_end|>"
        ids = server.stub.Tokenize(pb2.TokenizeRequest(text=markup, parse_special=True)).token_ids
        rendered = server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=ids,
                                                                render_special=True))
        assert rendered.text == markup
        assert server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=ids)).text == "user\nHi"
        # A character cut in half is no valid UTF-8: it comes back as U+FFFD.
        euro = list(server.stub.Tokenize(pb2.TokenizeRequest(text="€")).token_ids)
        if len(euro) > 1:
            assert "\ufffd" in server.stub.Detokenize(
                pb2.DetokenizeRequest(token_ids=euro[:1])).text


def metadata(reader, key):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def test_model_info_matches_the_gguf_metadata(served):
    model, server = served
    reader = GGUFReader(str(model))
    info = server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
    arch = metadata(reader, "general.architecture")
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    assert info.architecture == arch
    assert info.name == model.stem  # served under the file's name (no --served-model-name)
    assert list(info.served_model_names) == [model.stem]
    assert info.context_length == metadata(reader, f"{arch}.context_length")
    assert info.vocab_size == len(tokens)
    assert info.tokenizer_model == metadata(reader, "tokenizer.ggml.model")
    bos, eos = (metadata(reader, f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos"))
    assert (info.bos_token.id, info.bos_token.text) == (bos, tokens[bos])
    assert (info.eos_token.id, info.eos_token.text) == (eos, tokens[eos])
    assert eos in [t.id for t in info.end_of_generation_tokens]
    assert info.has_chat_template == ("tokenizer.chat_template" in reader.fields)
    assert info.kv_block_size == 16
    assert info.max_model_len == info.context_length
    assert info.num_kv_blocks == server.metrics()["tokenmill:kv_cache_blocks"] > 0


def test_metrics_endpoint_answers_only_metrics(served):
    _, server = served
    base = f"http://127.0.0.1:{server.metrics_port}"
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(base + "/other", timeout=10)
    assert error.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x"), timeout=10)
    assert error.value.code == 405
