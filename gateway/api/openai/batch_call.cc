#include "gateway/api/openai/batch_call.h"

#include "common/request_limits.h"
#include "gateway/api/json_fields.h"

namespace tokenmill::gateway {

std::optional<HttpError> ParseModelUserSalt(const nlohmann::json& body, std::string& model,
                                            std::string& cache_salt) {
  std::optional<std::string> text;
  GW_RETURN_IF_ERROR(String(body, "model", text));
  model = text.value_or("");
  text.reset();
  // `user` identifies the end user for abuse monitoring, which the gateway has none of.
  GW_RETURN_IF_ERROR(String(body, "user", text));
  text.reset();
  GW_RETURN_IF_ERROR(String(body, "cache_salt", text));
  if (text) cache_salt = std::move(*text);
  return std::nullopt;
}

std::optional<HttpError> RefuseTooManyInputs(size_t count, const char* param) {
  if (count <= static_cast<size_t>(kMaxEmbedInputs)) return std::nullopt;
  return BadRequest(std::string(param) + " has " + std::to_string(count) + " items; at most " +
                        std::to_string(kMaxEmbedInputs) +
                        " per request: split them over several requests",
                    param);
}

nlohmann::json PromptOnlyUsage(int64_t prompt_tokens) {
  return {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
}

}  // namespace tokenmill::gateway
