// What the routes that send all of a body's inputs in one unary call share (/v1/embeddings,
// /v1/rerank): the body's model, user and cache_salt, the cap on inputs, and the usage.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "gateway/http/http_error.h"

namespace tokenmill::gateway {

// `model` (empty when absent: whichever model the backends serve), `user` (checked, then
// ignored) and `cache_salt` (left as it is when absent).
std::optional<HttpError> ParseModelUserSalt(const nlohmann::json& body, std::string& model,
                                            std::string& cache_salt);

// A 400 naming `param` when it holds more than kMaxEmbedInputs items.
std::optional<HttpError> RefuseTooManyInputs(size_t count, const char* param);

// The prompt tokens over a reply's items (one per input, each with its prompt_tokens).
template <typename Items>
int64_t SumPromptTokens(const Items& items) {
  int64_t tokens = 0;
  for (const auto& item : items) tokens += item.prompt_tokens();
  return tokens;
}

// {"prompt_tokens": n, "total_tokens": n}: these calls generate nothing.
nlohmann::json PromptOnlyUsage(int64_t prompt_tokens);

}  // namespace tokenmill::gateway
