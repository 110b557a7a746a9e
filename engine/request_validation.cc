#include "engine/request_validation.h"

#include <cmath>
#include <cstdio>
#include <limits>
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

// `field`[i] = id for the first id outside the vocabulary.
Status CheckTokenIds(std::string_view field, const std::vector<TokenId>& ids, int vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return InvalidArgumentError(std::string(field) + "[" + std::to_string(i) + "] = " +
                                  std::to_string(ids[i]) + " is outside the vocabulary (0.." +
                                  std::to_string(vocab_size - 1) + ")");
    }
  }
  return OkStatus();
}

Status CheckPrompt(const GenerateRequest& request, const RequestLimits& limits) {
  const size_t num_prompt = request.prompt_token_ids.size();
  if (num_prompt == 0) return InvalidArgumentError("the prompt is empty: give at least one token");
  TM_RETURN_IF_ERROR(CheckTokenIds("prompt_token_ids", request.prompt_token_ids,
                                   limits.vocab_size));
  // An embedding generates nothing: its prompt may fill the context.
  const size_t room = static_cast<size_t>(limits.max_model_len) - (request.embedding ? 0 : 1);
  if (num_prompt > room) {
    // OUT_OF_RANGE: past the context, which gateways answer as context_length_exceeded.
    return OutOfRangeError("the prompt is " + std::to_string(num_prompt) +
                           " tokens; this server's limit is " +
                           std::to_string(limits.max_model_len) +
                           (request.embedding ? " tokens: shorten it"
                                              : " tokens for prompt and output together: "
                                                "shorten the prompt"));
  }
  return OkStatus();
}

// The request's own fields (beside the sampler's parameters): counts, sizes and stops.
Status CheckCountsAndStops(const GenerateRequest& request, const RequestLimits& limits) {
  const SamplingParams& s = request.sampling;
  if (s.top_logprobs < 0) {
    return InvalidArgumentError("top_logprobs = " + std::to_string(s.top_logprobs) +
                                " must not be negative");
  }
  if (s.top_logprobs > kMaxTopLogprobs) {
    return InvalidArgumentError("top_logprobs = " + std::to_string(s.top_logprobs) +
                                " must be at most " + std::to_string(kMaxTopLogprobs));
  }
  if (s.top_logprobs > 0 && !s.logprobs) {
    return InvalidArgumentError("top_logprobs = " + std::to_string(s.top_logprobs) +
                                " needs logprobs: set logprobs to true, or top_logprobs to 0");
  }
  if (s.prompt_logprobs && (*s.prompt_logprobs < 0 || *s.prompt_logprobs > kMaxTopLogprobs)) {
    return InvalidArgumentError("prompt_logprobs = " + std::to_string(*s.prompt_logprobs) +
                                " must be in [0, " + std::to_string(kMaxTopLogprobs) + "]");
  }
  if (s.prompt_logprobs && request.kv_window) {
    return InvalidArgumentError(
        "prompt_logprobs does not work with kv_window: leave one of them unset");
  }
  if (request.n < 1 || request.n > kMaxSequencesPerRequest) {
    // Word for word the gateway's refusal of n (gateway/api/json_fields.cc's Integer).
    return InvalidArgumentError("n must be an integer in [1, " +
                                std::to_string(kMaxSequencesPerRequest) + "]");
  }
  if (s.max_tokens < 1) {
    // The one check of max_tokens' range: every API's clients see this message.
    return InvalidArgumentError("max_tokens must be at least 1, got " +
                                std::to_string(s.max_tokens) +
                                " (max_tokens must be an integer in [1, " +
                                std::to_string(std::numeric_limits<int>::max()) + "])");
  }
  if (request.kv_window) {
    const KvWindow& window = *request.kv_window;
    if (window.sink_tokens < 0 || window.window_tokens < 0 ||
        window.sink_tokens > limits.max_model_len ||
        window.window_tokens > limits.max_model_len) {
      return InvalidArgumentError("kv_window.sink_tokens and window_tokens must be at most the "
                                  "context length, " + std::to_string(limits.max_model_len));
    }
  }
  if (s.min_tokens < 0) {
    return InvalidArgumentError("sampling.min_tokens = " + std::to_string(s.min_tokens) +
                                " must not be negative");
  }
  if (s.min_tokens > s.max_tokens) {
    return InvalidArgumentError("sampling.min_tokens = " + std::to_string(s.min_tokens) +
                                " exceeds max_tokens = " + std::to_string(s.max_tokens) +
                                ": lower it or raise max_tokens");
  }
  TM_RETURN_IF_ERROR(CheckTokenIds("stop_token_ids", s.stop_token_ids, limits.vocab_size));
  TM_RETURN_IF_ERROR(
      CheckTokenIds("predicted_token_ids", request.predicted_token_ids, limits.vocab_size));
  if (request.predicted_token_ids.size() > static_cast<size_t>(limits.max_model_len)) {
    return InvalidArgumentError("prediction: " +
                                std::to_string(request.predicted_token_ids.size()) +
                                " tokens, more than the context (" +
                                std::to_string(limits.max_model_len) + "): shorten it");
  }
  for (size_t i = 0; i < request.stop_strings.size(); ++i) {
    if (request.stop_strings[i].empty()) {
      return InvalidArgumentError("stop_strings[" + std::to_string(i) +
                                  "] is empty: remove it (stop strings must not be empty)");
    }
  }
  return OkStatus();
}

// The sampler's parameters, each named with its allowed range.
Status CheckSampling(const SamplingParams& s, int vocab_size) {
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
                                  Num(bias) + " must be in [-100, 100] (logit_bias values "
                                  "must be numbers in [-100, 100])");
    }
  }
  if (s.sequence_index < 0) {
    return InvalidArgumentError("sampling.sequence_index must not be negative");
  }
  return OkStatus();
}

Status CheckGrammar(const grammar::CompiledGrammar* grammar, const SamplingParams& sampling,
                    const RequestLimits& limits) {
  if (grammar == nullptr) return OkStatus();
  TM_RETURN_IF_ERROR(ValidateConstrainedSampling(sampling));
  const size_t grammar_vocab = grammar->vocab().size();
  if (grammar_vocab != static_cast<size_t>(limits.vocab_size)) {
    return InvalidArgumentError("the grammar was compiled for another vocabulary (" +
                                std::to_string(grammar_vocab) + " tokens, not " +
                                std::to_string(limits.vocab_size) + ")");
  }
  return OkStatus();
}

// Beam search ranks hypotheses by the model's raw log-probabilities of token ids: what would
// change the distribution, the text or the ending is refused rather than ignored.
Status CheckBeamSearch(const GenerateRequest& request, const RequestLimits& limits) {
  if (!request.beam_search) return OkStatus();
  const float penalty = request.beam_search->length_penalty;
  if (!std::isfinite(penalty)) {
    return InvalidArgumentError("beam_search.length_penalty must be a finite number, got " +
                                Num(penalty) + ": give a number, or leave it unset for the "
                                "default, 1");
  }
  const SamplingParams& s = request.sampling;
  std::string field;
  if (!s.greedy()) field = "sampling.temperature";
  else if (s.top_k > 0) field = "sampling.top_k";
  else if (s.top_p != 1.0f) field = "sampling.top_p";
  else if (s.min_p != 0.0f) field = "sampling.min_p";
  else if (s.repetition_penalty != 1.0f) field = "sampling.repetition_penalty";
  else if (s.presence_penalty != 0.0f) field = "sampling.presence_penalty";
  else if (s.frequency_penalty != 0.0f) field = "sampling.frequency_penalty";
  else if (!s.logit_bias.empty()) field = "sampling.logit_bias";
  else if (s.min_tokens > 0) field = "sampling.min_tokens";
  else if (s.wants_logprobs()) field = "logprobs";
  else if (s.prompt_logprobs) field = "prompt_logprobs";
  else if (!request.stop_strings.empty()) field = "stop_strings";
  else if (request.kv_window) field = "kv_window";
  else if (!request.predicted_token_ids.empty()) field = "prediction";
  else if (request.grammar) field = "structured output";
  if (!field.empty()) {
    return InvalidArgumentError(field + " does not combine with beam search, which ranks "
                                "hypotheses by the model's raw log-probabilities and ends them "
                                "at token ids: drop " + field + " or beam search");
  }
  if (limits.speculative_decoding) {
    return InvalidArgumentError("beam search does not work with speculative decoding yet: run "
                                "the server without --spec to use it");
  }
  return OkStatus();
}

}  // namespace

Status ValidateConstrainedSampling(const SamplingParams& sampling) {
  if (sampling.min_tokens > 0) {
    return InvalidArgumentError(
        "sampling.min_tokens does not combine with structured output: the grammar decides "
        "where the output may end; drop min_tokens");
  }
  return OkStatus();
}

namespace {

// An embedding computes a prompt and nothing else: what only a generation uses is refused.
Status CheckEmbedding(const GenerateRequest& request, const RequestLimits& limits) {
  if (!request.embedding) return OkStatus();
  const Pooling pooling = request.embedding->pooling;
  if (pooling != Pooling::kMean && pooling != Pooling::kCls && pooling != Pooling::kLast) {
    return InvalidArgumentError("embedding.pooling " + std::string(PoolingName(pooling)) +
                                " pools nothing: use mean, cls or last");
  }
  if (request.embedding->classify && (!limits.has_classifier || pooling == Pooling::kMean)) {
    return FailedPreconditionError(
        "embedding.classify needs a reranker's classification head (cls.output in the GGUF) "
        "over a cls or last pooling");
  }
  if (request.n != 1 || request.beam_search || request.kv_window || request.grammar ||
      request.output_parsing || !request.stop_strings.empty() ||
      request.sampling.prompt_logprobs || !request.predicted_token_ids.empty()) {
    return InvalidArgumentError(
        "an embedding takes a prompt alone: drop n, beam search, kv_window, prompt_logprobs, "
        "grammars, stop strings and predictions");
  }
  return OkStatus();
}

}  // namespace

Status ValidateGenerateRequest(const GenerateRequest& request, const RequestLimits& limits) {
  if (limits.embeddings_only && !request.embedding) {
    return FailedPreconditionError(
        "this server's model is an encoder: it computes embeddings (Embed, /v1/embeddings), "
        "not text");
  }
  TM_RETURN_IF_ERROR(CheckPrompt(request, limits));
  TM_RETURN_IF_ERROR(CheckEmbedding(request, limits));
  if (request.lora < 0) {  // an id the engine does not hold is refused as it is added
    return InvalidArgumentError("lora = " + std::to_string(request.lora) +
                                ": give 0 (none) or an adapter's id");
  }
  TM_RETURN_IF_ERROR(CheckCountsAndStops(request, limits));
  TM_RETURN_IF_ERROR(CheckSampling(request.sampling, limits.vocab_size));
  TM_RETURN_IF_ERROR(CheckGrammar(request.grammar.get(), request.sampling, limits));
  TM_RETURN_IF_ERROR(CheckBeamSearch(request, limits));
  if (request.kv_window.has_value() && limits.speculative_decoding) {
    return InvalidArgumentError(
        "kv_window does not work with speculative decoding yet: drop kv_window or run the "
        "server without --spec");
  }
  return OkStatus();
}

Status RequireSink(const GenerateRequest& request) {
  if (!request.sink) return InvalidArgumentError("the request has no output sink");
  return OkStatus();
}

StatusOr<ValidatedRequest> ValidatedRequest::Validate(GenerateRequest request,
                                                      const RequestLimits& limits) {
  TM_RETURN_IF_ERROR(ValidateGenerateRequest(request, limits));
  return ValidatedRequest(std::move(request));
}

Status ValidatedRequest::Constrain(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                   std::vector<TokenId> starts_after,
                                   std::vector<TokenId> reasoning_opens,
                                   const RequestLimits& limits) {
  TM_RETURN_IF_ERROR(CheckGrammar(grammar.get(), request_.sampling, limits));
  if (request_.beam_search && grammar) {
    return InvalidArgumentError("structured output does not combine with beam search: drop "
                                "response_format or beam search");
  }
  request_.grammar = std::move(grammar);
  request_.grammar_starts_after = std::move(starts_after);
  request_.grammar_reasoning_opens = std::move(reasoning_opens);
  return OkStatus();
}

}  // namespace tokenmill
