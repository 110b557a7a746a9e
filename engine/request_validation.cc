#include "engine/request_validation.h"

#include <string>

namespace tokenmill {

Status ValidateGenerateRequest(const GenerateRequest& request, const RequestLimits& limits) {
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  if (num_prompt == 0) return InvalidArgumentError("the prompt is empty: give at least one token");
  for (const TokenId id : request.prompt_token_ids) {
    if (id < 0 || id >= limits.vocab_size) {
      return InvalidArgumentError("prompt token id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " +
                                  std::to_string(limits.vocab_size) + ")");
    }
  }
  if (num_prompt >= limits.max_model_len) {
    return InvalidArgumentError("the prompt has " + std::to_string(num_prompt) +
                                " tokens; the context holds " +
                                std::to_string(limits.max_model_len) +
                                " with at least one generated: shorten the prompt");
  }
  if (request.sampling.max_tokens < 1) {
    return InvalidArgumentError("max_tokens must be at least 1, got " +
                                std::to_string(request.sampling.max_tokens));
  }
  for (const TokenId id : request.sampling.stop_token_ids) {
    if (id < 0) {
      return InvalidArgumentError("stop token id " + std::to_string(id) + " is negative");
    }
  }
  for (const std::string& stop : request.stop_strings) {
    if (stop.empty()) return InvalidArgumentError("stop strings must not be empty");
  }
  if (!request.sink) return InvalidArgumentError("the request has no output sink");
  return OkStatus();
}

}  // namespace tokenmill
