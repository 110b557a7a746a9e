"""Reranking through tokenmill-server (Rerank) and the gateway's POST /v1/rerank, against
llama.cpp's own rank pooling (llama-cpp-python in embedding mode, computed live): a tiny random
bert with a classification head (cls: dense and tanh, cls.output: one label) and BGE's WordPiece
vocabulary. Each document is written as llama.cpp's server writes it ([CLS] query [SEP]
document with this vocabulary, or the GGUF's rerank template), scored by the head over its
[CLS] row, and the score must equal llama.cpp's for those token ids. The gateway's rerank
routes (Jina's, Cohere's and vLLM's shape) rank by those scores. A tiny random qwen3 written
as a Qwen3-Reranker (rerank template, yes/no head, softmax) scores as llama.cpp's too."""
import sys

import grpc
import llama_cpp
import numpy as np
import pytest

from gateway_harness import Gateway, backend_address
from llama_reference import llama_cpp_embedder
from server_harness import MODELS_DIR, REPO, RPC_TIMEOUT_S, Server, pb2

sys.path.insert(0, str(REPO / "tests" / "reference"))
from tiny_families import bert, qwen3  # noqa: E402
from tiny_families.common import CONTEXT  # noqa: E402

RANK = llama_cpp.LLAMA_POOLING_TYPE_RANK
BERT_VOCAB = MODELS_DIR / "ggml-vocab-bert-bge.gguf"
CLS_ID, SEP_ID = 101, 102  # BGE's [CLS] and [SEP]
QUERY = "what is a panda?"
DOCUMENTS = ["hi", "The giant panda is a bear species endemic to China.",
             "Paris is the capital of France.", "Pandas eat bamboo; they are bears!"]
# F32 weights: the score (a logit of a few units) within this of llama.cpp's.
SCORE_BOUND = 1e-3


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    if not BERT_VOCAB.exists():
        pytest.skip(f"{BERT_VOCAB} is missing: run scripts/setup")
    path = tmp_path_factory.mktemp("rerank") / "tiny-bert-rank.gguf"
    bert.write(str(path), vocabulary_from=str(BERT_VOCAB), pooling_type=RANK, classifier=True)
    return path


@pytest.fixture(scope="module")
def server(reranker):
    with Server(model=reranker) as s:
        yield s


def llama_cpp_score(llm, ids):
    llm._batch.reset()
    llm._batch.add_sequence(list(ids), 0, True)
    llm._ctx.kv_cache_clear()
    llm._ctx.decode(llm._batch)
    llm._batch.reset()
    score = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)[0]
    llm._ctx.kv_cache_clear()
    return score


def rerank(server, query, documents, **fields):
    request = pb2.RerankRequest(query=query, documents=documents, **fields)
    return server.stub.Rerank(request, timeout=RPC_TIMEOUT_S)


def test_scores_are_llama_cpps_rank_pooling(reranker, server):
    llm = llama_cpp_embedder(reranker, n_ctx=CONTEXT)
    assert llm.pooling_type() == RANK
    info = server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
    assert info.pooling == "rank"
    response = rerank(server, QUERY, DOCUMENTS)
    assert len(response.results) == len(DOCUMENTS)

    def plain(text):
        return llm.tokenize(text.encode(), add_bos=False, special=False)

    scores = []
    for document, result in zip(DOCUMENTS, response.results):
        ids = [CLS_ID] + plain(QUERY) + [SEP_ID] + plain(document)
        assert result.prompt_tokens == len(ids), document
        want = llama_cpp_score(llm, ids)
        assert abs(result.score - want) < SCORE_BOUND, f"{document!r}: {result.score} vs {want}"
        scores.append(result.score)
    assert len(set(scores)) == len(scores)  # the documents are told apart
    # One document alone scores as in the batch.
    (alone,) = rerank(server, QUERY, [DOCUMENTS[1]]).results
    assert alone.score == response.results[1].score


def test_a_rerank_template_writes_each_input(tmp_path):
    """tokenizer.chat_template.rerank: {query} and {document} replaced, special-token text
    parsed, nothing added."""
    model = tmp_path / "with-template.gguf"
    bert.write(str(model), vocabulary_from=str(BERT_VOCAB), pooling_type=RANK, classifier=True,
               rerank_template="[CLS] q: {query} [SEP] d: {document} [SEP]")
    llm = llama_cpp_embedder(model, n_ctx=CONTEXT)
    with Server(model=model) as s:
        (result,) = rerank(s, QUERY, [DOCUMENTS[3]]).results
    prompt = f"[CLS] q: {QUERY} [SEP] d: {DOCUMENTS[3]} [SEP]"
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    assert ids[0] == CLS_ID and ids[-1] == SEP_ID
    assert result.prompt_tokens == len(ids)
    assert abs(result.score - llama_cpp_score(llm, ids)) < SCORE_BOUND


def test_a_qwen3_reranker_scores_as_llama_cpp(tmp_path):
    """Qwen3-Reranker's form (a decoder): its rerank template writes each input, the last
    token's hidden state goes through cls.output (the rows of "yes" and "no"), and a softmax
    over the two makes the score p(yes), as llama.cpp's rank pooling for qwen3."""
    stories = MODELS_DIR / "stories260K.gguf"
    if not stories.exists():
        pytest.skip(f"{stories} is missing: run scripts/setup")
    model = tmp_path / "tiny-qwen3-reranker.gguf"
    template = "Judge the document.\nQuery: {query}\nDocument: {document}\nRelevant:"
    qwen3.write(str(model), vocabulary_from=str(stories), pooling_type=RANK,
                reranker_template=template)
    llm = llama_cpp_embedder(model, n_ctx=CONTEXT)
    assert llm.pooling_type() == RANK
    documents = ["Lily had a red ball.", "The cat sat on the mat and slept all day.", "no"]
    with Server(model=model) as s:
        results = rerank(s, "Who had a ball?", documents).results
    scores = []
    for document, result in zip(documents, results):
        prompt = template.format(query="Who had a ball?", document=document)
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        assert result.prompt_tokens == len(ids), document
        want = llama_cpp_score(llm, ids)
        assert 0.0 < want < 1.0  # a probability: the softmax ran
        assert abs(result.score - want) < SCORE_BOUND, f"{document!r}: {result.score} vs {want}"
        scores.append(result.score)
    assert len(set(scores)) == len(scores)


@pytest.mark.parametrize("query,documents,message", [
    ("", ["a"], "query is empty"),
    ("q", [], "documents has 0 entries"),
    ("q", ["a", ""], "documents[1] is empty"),
    ("q", ["a"] * 257, "give 1 to 256"),
])
def test_bad_rerank_input(server, query, documents, message):
    with pytest.raises(grpc.RpcError) as e:
        rerank(server, query, documents)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in e.value.details()


def test_embed_and_rerank_refuse_the_other_kind_of_model(server, tmp_path):
    with pytest.raises(grpc.RpcError) as e:
        server.stub.Embed(pb2.EmbedRequest(inputs=[pb2.EmbedInput(text="hi")]),
                          timeout=RPC_TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    path = tmp_path / "tiny-bert-cls.gguf"
    bert.write(str(path), vocabulary_from=str(BERT_VOCAB), pooling_type=2)
    with Server(model=path) as embedder:
        with pytest.raises(grpc.RpcError) as e:
            rerank(embedder, QUERY, DOCUMENTS)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "reranker" in e.value.details()


def test_gateway_rerank_ranks_and_counts(server):
    response = rerank(server, QUERY, DOCUMENTS)
    scores = [r.score for r in response.results]
    with Gateway(backend_address(server)) as g:
        documents = [DOCUMENTS[0], {"text": DOCUMENTS[1]}, *DOCUMENTS[2:]]
        for path in ["/v1/rerank", "/rerank", "/v1/reranking", "/v2/rerank"]:
            r = g.http.post(path, json={"query": QUERY, "documents": documents})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["id"].startswith("rerank-") and body["object"] == "list"
            assert body["usage"]["prompt_tokens"] == sum(x.prompt_tokens for x in response.results)
            order = sorted(range(len(scores)), key=lambda i: -scores[i])
            assert [x["index"] for x in body["results"]] == order
            # The float32 scores, exactly.
            assert [x["relevance_score"] for x in body["results"]] == [scores[i] for i in order]
            assert body["results"][0]["document"] == {"text": DOCUMENTS[order[0]]}
        r = g.http.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS, "top_n": 1,
                                            "return_documents": False})
        assert r.json()["results"] == [{"index": order[0], "relevance_score": scores[order[0]]}]
        r = g.http.post("/v1/rerank", json={"query": QUERY, "documents": ["a", ""]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "documents"
        r = g.http.post("/v1/rerank", json={"query": QUERY, "documents": ["x " * 5000]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        for path in ["/v1/rerank", "/rerank", "/v1/reranking", "/v2/rerank"]:
            assert g.metrics()[f"tokenmill_gateway:requests_total{{route={path},status=200}}"] >= 1
