"""`tokenmill tokenize` against llama.cpp's ids from the golden files, and its errors."""
import json
import os
import subprocess

import pytest
from gguf import GGUFWriter

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
DATA = os.path.join(os.environ["TOKENMILL_TEST_DATA_DIR"], "tokenizer")
STEMS = ["SmolLM2-135M-Instruct.Q4_1", "stories260K", "ggml-vocab-bert-bge"]


def tokenize(*args):
    return subprocess.run([BIN, "tokenize", *args], capture_output=True, text=True)


def golden_cases(stem, count=40):
    with open(os.path.join(DATA, stem + ".json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    # Spread over the corpus; texts starting with "-" would read as options.
    picked = [c for c in cases[:: max(1, len(cases) // count)] if not c["text"].startswith("-")]
    wanted = ("", "<|im_start|>user\nHi<|im_end|>", "<s>hello</s>")
    return picked + [c for c in cases if c["text"] in wanted]


@pytest.mark.parametrize("stem", STEMS)
def test_ids_match_llama_cpp(stem, tmp_path):
    model = os.path.join(MODELS, stem + ".gguf")
    for case in golden_cases(stem):
        text_file = tmp_path / "text.txt"
        text_file.write_bytes(case["text"].encode("utf-8"))
        for flags, expected in [([], case["ids"]), (["--parse-special"], case["ids_special"])]:
            r = tokenize("--model", model, "--file", str(text_file), *flags)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout) == expected, (case["text"], flags)


def test_text_argument_and_bos():
    r = tokenize("--model", os.path.join(MODELS, "stories260K.gguf"), "Once upon a time")
    assert r.returncode == 0, r.stderr
    ids = json.loads(r.stdout)
    assert ids[0] == 1  # the SentencePiece model adds BOS (<s>, id 1)
    assert len(ids) > 1
    r = tokenize("--model", os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf"), "<|im_end|>",
                 "--parse-special")
    assert json.loads(r.stdout) == [2]  # add_bos_token is false: no BOS


def test_wordpiece_adds_cls_and_sep():
    model = os.path.join(MODELS, "ggml-vocab-bert-bge.gguf")
    r = tokenize("--model", model, "Hello world")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    r = tokenize("--model", model, "--no-special", "Hello world")
    assert json.loads(r.stdout) == [7592, 2088]


def test_missing_model_is_an_error():
    r = tokenize("--model", "/nonexistent/model.gguf", "hi")
    assert r.returncode != 0
    assert r.stdout == ""
    assert "error:" in r.stderr and "/nonexistent/model.gguf" in r.stderr


def write_vocab_gguf(path, model, pre=None):
    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(["a", "b", "ab"])
    writer.add_token_merges(["a b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_unsupported_tokenizer_model_is_named(tmp_path):
    path = tmp_path / "unigram.gguf"
    write_vocab_gguf(path, "t5")
    r = tokenize("--model", str(path), "hi")
    assert r.returncode != 0
    assert "tokenizer.ggml.model 't5'" in r.stderr


def test_unsupported_pre_tokenizer_is_named(tmp_path):
    path = tmp_path / "pre.gguf"
    write_vocab_gguf(path, "gpt2", pre="no-such-pre")
    r = tokenize("--model", str(path), "hi")
    assert r.returncode != 0
    assert "tokenizer.ggml.pre 'no-such-pre'" in r.stderr
    write_vocab_gguf(path, "gpt2", pre="gpt-2")
    r = tokenize("--model", str(path), "ab")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [2]  # "a" + "b" merged by the one merge
