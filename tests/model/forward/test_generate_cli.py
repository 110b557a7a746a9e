"""`tokenmill generate` end to end: greedy tokens equal llama.cpp's golden continuation
(stories260K, whose continuations all match), text prompts tokenized like llama.cpp,
and the error paths."""
import json
import os
import subprocess

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
DATA = os.environ["TOKENMILL_TEST_DATA_DIR"]
STORIES = os.path.join(MODELS, "stories260K.gguf")


def golden(stem):
    with open(os.path.join(DATA, "logits", stem + ".json")) as f:
        return json.load(f)


def generate(*args):
    return subprocess.run([BIN, "generate", *args], capture_output=True, text=True)


def test_text_prompt_gives_llama_cpp_greedy_tokens_and_their_text():
    prompt = golden("stories260K")["prompts"][0]
    result = generate("--model", STORIES, "--prompt", prompt["text"], "--max-tokens", "64",
                      "--temperature", "0", "--json", "--threads", "2")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["tokens"] == prompt["continuation"]
    assert out["text"].startswith(" She") or len(out["text"]) > 20, out["text"]
    plain = generate("--model", STORIES, "--prompt", prompt["text"], "--max-tokens", "64",
                     "--threads", "1")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.rstrip("\n") == out["text"]


def test_prompt_token_ids_and_scalar_kernels():
    prompt = golden("stories260K")["prompts"][3]
    ids = ",".join(str(t) for t in prompt["prompt_tokens"])
    result = generate("--model", STORIES, "--prompt-tokens", ids, "--max-tokens", "20",
                      "--json", "--isa", "scalar", "--kv-type", "f32")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tokens"] == prompt["continuation"][:20]


def test_errors_say_what_to_change():
    missing = generate("--model", os.path.join(MODELS, "nope.gguf"), "--prompt", "hi")
    assert missing.returncode != 0 and "error:" in missing.stderr
    too_long = generate("--model", STORIES, "--prompt", "hi", "--max-tokens", "1000")
    assert too_long.returncode != 0 and "context" in too_long.stderr
    bad_ids = generate("--model", STORIES, "--prompt-tokens", "1,x")
    assert bad_ids.returncode != 0 and "token ids" in bad_ids.stderr
    out_of_vocab = generate("--model", STORIES, "--prompt-tokens", "1,99999")
    assert out_of_vocab.returncode != 0 and "vocabulary" in out_of_vocab.stderr
    no_prompt = generate("--model", STORIES)
    assert no_prompt.returncode != 0
    # stories260K's heads have 8 values: q4_0 KV quantizes blocks of 32.
    q4_0 = generate("--model", STORIES, "--prompt", "hi", "--kv-type", "q4_0")
    assert q4_0.returncode != 0 and "heads have 8" in q4_0.stderr, q4_0.stderr
    fp8 = generate("--model", STORIES, "--prompt", "hi", "--kv-type", "fp8")
    assert fp8.returncode != 0 and "needs --device cuda" in fp8.stderr, fp8.stderr


def test_q4_0_kv_on_the_default_model():
    """SmolLM2's heads of 64 take q4_0 (rotated as llama.cpp rotates them): the prompt's
    greedy continuation still starts as f16's does."""
    smollm2 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
    prompt = golden("SmolLM2-135M-Instruct.Q4_1")["prompts"][0]
    ids = ",".join(str(t) for t in prompt["prompt_tokens"])
    runs = {}
    for kv_type in ("f16", "q4_0"):
        result = generate("--model", smollm2, "--prompt-tokens", ids, "--max-tokens", "4",
                          "--json", "--kv-type", kv_type, "--threads", "2")
        assert result.returncode == 0, result.stderr
        runs[kv_type] = json.loads(result.stdout)["tokens"]
    assert len(runs["q4_0"]) == 4
    assert runs["q4_0"][0] == runs["f16"][0], runs


def test_device_cuda_gives_llama_cpp_greedy_tokens_or_says_to_use_the_cpu():
    prompt = golden("stories260K")["prompts"][0]
    ids = ",".join(str(t) for t in prompt["prompt_tokens"])
    result = generate("--model", STORIES, "--prompt-tokens", ids, "--max-tokens", "64",
                      "--json", "--device", "cuda")
    if result.returncode != 0:  # no CUDA backend in this build, or no GPU here
        assert "use --device cpu" in result.stderr, result.stderr
        return
    out = json.loads(result.stdout)
    assert out["tokens"] == prompt["continuation"]
