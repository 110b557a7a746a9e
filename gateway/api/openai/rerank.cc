#include "gateway/api/openai/rerank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "gateway/api/json_fields.h"
#include "gateway/api/openai/batch_call.h"
#include "gateway/backends/unary_call.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

constexpr char kDocumentShape[] = "a string or an object {\"text\": \"...\"}";

std::optional<HttpError> ParseDocument(const json& document, size_t index, std::string& text) {
  const std::string where = "documents[" + std::to_string(index) + "]";
  const json* value = &document;
  if (document.is_object()) {
    // Other keys (Cohere's extra fields, Jina's image) would not be ranked: say so.
    for (const auto& [key, ignored] : document.items()) {
      if (key != "text") {
        return BadRequest(where + "." + key + " is not supported: each document is " +
                              kDocumentShape,
                          "documents");
      }
    }
    value = Field(document, "text");
  }
  if (value == nullptr || !value->is_string()) {
    return BadRequest(where + " must be " + kDocumentShape, "documents");
  }
  text = value->get<std::string>();
  if (text.empty()) return BadRequest(where + " is empty", "documents");
  return std::nullopt;
}

std::optional<HttpError> ParseDocuments(const json& body, v1::RerankRequest& request) {
  const json* documents = Field(body, "documents");
  if (documents == nullptr) return BadRequest("documents is required", "documents");
  if (!documents->is_array()) {
    return BadRequest(std::string("documents must be a list, each ") + kDocumentShape,
                      "documents");
  }
  if (documents->empty()) return BadRequest("documents is empty", "documents");
  GW_RETURN_IF_ERROR(RefuseTooManyInputs(documents->size(), "documents"));
  for (size_t i = 0; i < documents->size(); ++i) {
    GW_RETURN_IF_ERROR(ParseDocument((*documents)[i], i, *request.add_documents()));
  }
  return std::nullopt;
}

int64_t PromptTokens(const v1::RerankResponse& response) {
  return SumPromptTokens(response.results());
}

json RerankAnswer(const UnaryReply<RerankCall, v1::RerankResponse>& reply) {
  return RerankJson(reply.call, reply.model, reply.response);
}

}  // namespace

std::optional<HttpError> ParseRerankRequest(const json& body, RerankCall& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  GW_RETURN_IF_ERROR(RefuseUnknown(body, {"model", "query", "documents", "top_n",
                                          "return_documents", "user", "cache_salt"}));
  GW_RETURN_IF_ERROR(ParseModelUserSalt(body, out.model, *out.request.mutable_cache_salt()));
  std::optional<std::string> query;
  GW_RETURN_IF_ERROR(String(body, "query", query));
  if (!query) return BadRequest("query is required", "query");
  if (query->empty()) return BadRequest("query is empty", "query");
  out.request.set_query(std::move(*query));
  GW_RETURN_IF_ERROR(
      Integer(body, "top_n", 1, std::numeric_limits<int32_t>::max(), out.top_n));
  std::optional<bool> return_documents;
  GW_RETURN_IF_ERROR(Bool(body, "return_documents", return_documents));
  out.return_documents = return_documents.value_or(true);
  return ParseDocuments(body, out.request);
}

json RerankJson(const RerankCall& call, const std::string& model,
                const v1::RerankResponse& response) {
  // NaN ranks last: a comparison with it would break the sort's ordering.
  const auto score = [&response](int i) {
    const float value = response.results(i).score();
    return std::isnan(value) ? -std::numeric_limits<float>::infinity() : value;
  };
  std::vector<int> order(static_cast<size_t>(response.results_size()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&score](int a, int b) { return score(a) > score(b); });
  if (call.top_n && static_cast<size_t>(*call.top_n) < order.size()) {
    order.resize(static_cast<size_t>(*call.top_n));
  }
  json results = json::array();
  for (const int i : order) {
    json result = {{"index", i},
                   {"relevance_score", static_cast<double>(response.results(i).score())}};
    if (call.return_documents && i < call.request.documents_size()) {
      result["document"] = {{"text", call.request.documents(i)}};
    }
    results.push_back(std::move(result));
  }
  return {{"id", call.request.request_id()},
          {"object", "list"},
          {"model", model},
          {"usage", PromptOnlyUsage(PromptTokens(response))},
          {"results", std::move(results)}};
}

asio::awaitable<void> HandleRerank(HttpExchange& exchange, const HttpRequest& request) {
  co_await HandleUnaryCall(exchange, request,
                           UnaryCall<RerankCall, v1::RerankResponse>{
                               .parse = ParseRerankRequest,
                               .send = AwaitRerank,
                               .answer = RerankAnswer,
                               .tokens_used = PromptTokens,
                               .id_prefix = "rerank",
                               .base_model_only = true});
}

}  // namespace tokenmill::gateway
