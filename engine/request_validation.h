// The checks Submit makes on the caller's thread, so a bad request fails there with a
// message saying what to change and never reaches the engine loop. A request is checked
// once, where it is submitted: what passed travels as a ValidatedRequest.
#pragma once

#include <utility>

#include "common/status.h"
#include "engine/generate_request.h"

namespace tokenmill {

// What a request is checked against: the engine's, from EngineCore::limits().
struct RequestLimits {
  int max_model_len = 0;  // prompt plus generated tokens
  int vocab_size = 0;
  bool speculative_decoding = false;  // refuses kv_window, which does not work with it yet
};

// The most sequences one request may ask for (GenerateRequest::n).
inline constexpr int kMaxSequencesPerRequest = 16;

// InvalidArgument, naming the field and its allowed range, for a temperature < 0, top_p
// outside (0, 1], top_k < -1, min_p outside [0, 1], repetition_penalty <= 0, presence or
// frequency penalties outside [-2, 2], a logit_bias id outside [0, vocab_size) or value
// outside [-100, 100], min_tokens outside [0, max_tokens], top_logprobs outside [0, 20], or
// any NaN or infinity.
Status ValidateSamplingParams(const SamplingParams& sampling, int vocab_size);

// InvalidArgument when `sampling` asks for what structured output cannot honour: min_tokens
// (the grammar decides where the output may end).
Status ValidateConstrainedSampling(const SamplingParams& sampling);

// InvalidArgument for an empty prompt, a token id outside the vocabulary, a prompt that
// leaves no room to generate, max_tokens < 1, bad sampling parameters (above), n outside
// [1, kMaxSequencesPerRequest], a negative stop token id, an empty stop string, a missing
// sink, a kv_window under speculative decoding, or a grammar with min_tokens or compiled for
// another vocabulary.
Status ValidateGenerateRequest(const GenerateRequest& request, const RequestLimits& limits);

// A request that passed ValidateGenerateRequest: what EngineCore::Add queues.
class ValidatedRequest {
 public:
  static StatusOr<ValidatedRequest> Validate(GenerateRequest request, const RequestLimits& limits);

  const GenerateRequest& get() const { return request_; }
  GenerateRequest Take() && { return std::move(request_); }

 private:
  explicit ValidatedRequest(GenerateRequest request) : request_(std::move(request)) {}

  GenerateRequest request_;
};

}  // namespace tokenmill
