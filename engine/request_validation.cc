#include "engine/request_validation.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "engine/sampling/token_logprobs.h"
#include "grammar/compiled_grammar.h"

namespace tokenmill {
namespace {

std::string Num(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

Status CheckFinite(std::string_view field, double value) {
  if (std::isfinite(value)) return OkStatus();
  return InvalidArgumentError("sampling." + std::string(field) + " must be a finite number, got " +
                              Num(value));
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& s, int vocab_size) {
  TM_RETURN_IF_ERROR(CheckFinite("temperature", s.temperature));
  if (s.temperature < 0) {
    return InvalidArgumentError("sampling.temperature must be >= 0 (0 is greedy), got " +
                                Num(s.temperature));
  }
  TM_RETURN_IF_ERROR(CheckFinite("top_p", s.top_p));
  if (s.top_p <= 0 || s.top_p > 1) {
    return InvalidArgumentError("sampling.top_p must be in (0, 1] (1 is off), got " +
                                Num(s.top_p));
  }
  if (s.top_k < -1) {
    return InvalidArgumentError("sampling.top_k must be -1 or 0 (off) or positive, got " +
                                std::to_string(s.top_k));
  }
  TM_RETURN_IF_ERROR(CheckFinite("min_p", s.min_p));
  if (s.min_p < 0 || s.min_p > 1) {
    return InvalidArgumentError("sampling.min_p must be in [0, 1] (0 is off), got " +
                                Num(s.min_p));
  }
  TM_RETURN_IF_ERROR(CheckFinite("repetition_penalty", s.repetition_penalty));
  if (s.repetition_penalty <= 0) {
    return InvalidArgumentError("sampling.repetition_penalty must be > 0 (1 is off), got " +
                                Num(s.repetition_penalty));
  }
  TM_RETURN_IF_ERROR(CheckFinite("presence_penalty", s.presence_penalty));
  TM_RETURN_IF_ERROR(CheckFinite("frequency_penalty", s.frequency_penalty));
  for (const auto& [field, value] : {std::pair<const char*, float>{"presence_penalty",
                                                                   s.presence_penalty},
                                     {"frequency_penalty", s.frequency_penalty}}) {
    if (value < -2 || value > 2) {
      return InvalidArgumentError("sampling." + std::string(field) +
                                  " must be in [-2, 2] (0 is off), got " + Num(value));
    }
  }
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgumentError("sampling.logit_bias has token id " + std::to_string(id) +
                                  ", outside the vocabulary [0, " + std::to_string(vocab_size) +
                                  ")");
    }
    if (!std::isfinite(bias) || bias < -100 || bias > 100) {
      return InvalidArgumentError("sampling.logit_bias[" + std::to_string(id) + "] = " +
                                  Num(bias) + " must be in [-100, 100]");
    }
  }
  if (s.min_tokens < 0 || s.min_tokens > s.max_tokens) {
    return InvalidArgumentError("sampling.min_tokens = " + std::to_string(s.min_tokens) +
                                " must be in [0, max_tokens = " + std::to_string(s.max_tokens) +
                                "]");
  }
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs) {
    return InvalidArgumentError("top_logprobs = " + std::to_string(s.top_logprobs) +
                                " must be in [0, " + std::to_string(kMaxTopLogprobs) + "]");
  }
  if (s.sequence_index < 0) {
    return InvalidArgumentError("sampling.sequence_index must not be negative");
  }
  return OkStatus();
}

Status ValidateConstrainedSampling(const SamplingParams& sampling) {
  if (sampling.min_tokens > 0) {
    return InvalidArgumentError(
        "sampling.min_tokens does not combine with structured output: the grammar decides "
        "where the output may end; drop min_tokens");
  }
  return OkStatus();
}

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
  TM_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling, limits.vocab_size));
  if (request.n < 1 || request.n > kMaxSequencesPerRequest) {
    return InvalidArgumentError("n = " + std::to_string(request.n) + " must be in [1, " +
                                std::to_string(kMaxSequencesPerRequest) + "]");
  }
  for (const TokenId id : request.sampling.stop_token_ids) {
    if (id < 0) {
      return InvalidArgumentError("stop token id " + std::to_string(id) + " is negative");
    }
  }
  for (const std::string& stop : request.stop_strings) {
    if (stop.empty()) return InvalidArgumentError("stop strings must not be empty");
  }
  if (request.grammar != nullptr) {
    TM_RETURN_IF_ERROR(ValidateConstrainedSampling(request.sampling));
    const size_t grammar_vocab = request.grammar->vocab().size();
    if (grammar_vocab != static_cast<size_t>(limits.vocab_size)) {
      return InvalidArgumentError("the grammar was compiled for another vocabulary (" +
                                  std::to_string(grammar_vocab) + " tokens, not " +
                                  std::to_string(limits.vocab_size) + ")");
    }
  }
  if (!request.sink) return InvalidArgumentError("the request has no output sink");
  if (request.kv_window.has_value() && limits.speculative_decoding) {
    return InvalidArgumentError(
        "kv_window does not work with speculative decoding yet: drop kv_window or run the "
        "server without --spec");
  }
  return OkStatus();
}

StatusOr<ValidatedRequest> ValidatedRequest::Validate(GenerateRequest request,
                                                      const RequestLimits& limits) {
  TM_RETURN_IF_ERROR(ValidateGenerateRequest(request, limits));
  return ValidatedRequest(std::move(request));
}

}  // namespace tokenmill
