// Reranking (POST /v1/rerank, and /rerank, /v1/reranking, /v2/rerank as llama-server and vLLM
// also serve it): the query and documents mapped to one Rerank call, and the reply in the
// shape vLLM, Jina and Cohere clients read, the documents ranked by relevance_score.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "gateway/http/http_error.h"
#include "gateway/http/http_exchange.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

struct RerankCall {
  std::string model;  // empty: whichever model the backends serve
  v1::RerankRequest request;
  std::optional<int64_t> top_n;  // keep the n most relevant; unset: all
  bool return_documents = true;  // each result's document: {"text": ...}
};

// Documents are strings or Jina's and Cohere's objects {"text": "..."}.
std::optional<HttpError> ParseRerankRequest(const nlohmann::json& body, RerankCall& out);

// {"id", "object": "list", "model", "usage", "results": [{"index", "relevance_score",
// "document"}, ...]}: most relevant first (ties in the documents' order), at most top_n.
// The id is the request's request_id.
nlohmann::json RerankJson(const RerankCall& call, const std::string& model,
                          const v1::RerankResponse& response);

boost::asio::awaitable<void> HandleRerank(HttpExchange& exchange, const HttpRequest& request);

}  // namespace tokenmill::gateway
