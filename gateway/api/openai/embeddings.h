// OpenAI's embeddings (POST /v1/embeddings): the body mapped to one Embed call over all its
// inputs, and the reply as OpenAI's list, each vector as numbers or as base64 of its float32
// bytes (what the openai package asks for by default).
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "gateway/http/http_error.h"
#include "gateway/http/http_exchange.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

struct EmbedCall {
  std::string model;  // empty: whichever model the backends serve
  v1::EmbedRequest request;
  bool base64 = false;                 // encoding_format "base64"
  std::optional<int64_t> dimensions;   // must be the model's embedding_length
};

std::optional<HttpError> ParseEmbeddingsRequest(const nlohmann::json& body, EmbedCall& out);

// 400 when `dimensions` asks for another width than the model's (no matryoshka truncation).
std::optional<HttpError> CheckDimensions(const v1::ModelInfo& info, const EmbedCall& call);

// Standard base64 of the values as little-endian float32s (numpy.frombuffer(..., "float32")).
std::string Float32Base64(std::span<const float> values);

// OpenAI's response: {"object": "list", "data": [...], "model", "usage"}.
nlohmann::json EmbeddingsJson(const EmbedCall& call, const std::string& model,
                              const v1::EmbedResponse& response);

boost::asio::awaitable<void> HandleEmbeddings(HttpExchange& exchange, const HttpRequest& request);

}  // namespace tokenmill::gateway
