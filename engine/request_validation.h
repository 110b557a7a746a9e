// The checks a request passes where it is submitted, so a bad request fails there with a
// message saying what to change and never reaches the engine loop. This is the one range
// check of a request: edges (the gRPC server) map their wire into a GenerateRequest and let
// these checks refuse it. What passed travels as a ValidatedRequest.
//
// A refusal names the field as GenerateRequest's clients know it, at the start of the
// message where a field is at fault: sampling.<name> for the sampler's parameters,
// max_tokens, top_logprobs, n, stop_token_ids[i], stop_strings[i], prompt_token_ids[i],
// kv_window.<name>. An edge whose wire calls a field otherwise renames it there
// (server/grpc/request_builder.cc: prompt_token_ids is token_ids.ids, stop_strings is stop).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "common/request_limits.h"
#include "common/status.h"
#include "engine/generate_request.h"

namespace tokenmill {

// What a request is checked against: the engine's, from EngineCore::limits().
struct RequestLimits {
  int max_model_len = 0;  // prompt plus generated tokens
  int vocab_size = 0;
  bool speculative_decoding = false;  // refuses kv_window, which does not work with it yet
  bool embeddings_only = false;  // an encoder's: a generation is refused (FailedPrecondition)
  bool has_classifier = false;   // a reranker's head: embedding.classify needs one
};

// InvalidArgument when `sampling` asks for what structured output cannot honour: min_tokens
// (the grammar decides where the output may end). An edge may ask before it compiles a
// grammar, so that nothing is compiled for a request that would be refused.
Status ValidateConstrainedSampling(const SamplingParams& sampling);

// InvalidArgument, in this order, for: an empty prompt, a prompt token id outside the
// vocabulary, a prompt that leaves no room to generate (OutOfRange: past the context),
// top_logprobs outside [0, 20] or above 0 without logprobs, prompt_logprobs outside [0, 20] or
// with a kv_window, n outside [1, kMaxSequencesPerRequest] (common/request_limits.h),
// max_tokens < 1, kv_window sizes outside [0, the context], min_tokens outside [0, max_tokens],
// a stop token id outside the vocabulary, an empty stop string, a sampling parameter outside
// its range (temperature < 0, top_p outside (0, 1], top_k < -1, min_p outside [0, 1],
// repetition_penalty <= 0, presence or frequency penalties outside [-2, 2], a logit_bias id
// outside the vocabulary or value outside [-100, 100], any NaN or infinity), a grammar with
// min_tokens or compiled for another vocabulary, a kv_window under speculative decoding, beam
// search with a non-finite length_penalty or with what it does not combine with (sampling
// parameters other than the seed, min_tokens, logprobs, prompt_logprobs, stop strings,
// kv_window, a prediction, a grammar, speculative decoding), an embedding that pools nothing
// or with what only a generation uses (GenerateRequest::embedding). The
// sink is not checked here (an edge may validate before it has one): Submit and
// EngineCore::Add require it.
Status ValidateGenerateRequest(const GenerateRequest& request, const RequestLimits& limits);

// InvalidArgument when the request has no sink to send its events to.
Status RequireSink(const GenerateRequest& request);

// A request that passed ValidateGenerateRequest: what Engine::Submit and EngineCore::Add
// queue without checking it again.
class ValidatedRequest {
 public:
  static StatusOr<ValidatedRequest> Validate(GenerateRequest request, const RequestLimits& limits);

  const GenerateRequest& get() const { return request_; }
  GenerateRequest Take() && { return std::move(request_); }

  // Where the events go: not part of what is checked, so an edge may validate first and
  // set the sink once it has one (a gRPC reactor).
  void set_sink(OutputSink sink) { request_.sink = std::move(sink); }

  // Constrains the validated request with a grammar compiled after its other fields passed
  // (GenerateRequest::grammar, grammar_starts_after, grammar_reasoning_opens): the grammar's
  // checks of ValidateGenerateRequest, so that the result is what Validate would have
  // accepted with the grammar set from the start.
  Status Constrain(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                   std::vector<TokenId> starts_after, std::vector<TokenId> reasoning_opens,
                   const RequestLimits& limits);

 private:
  explicit ValidatedRequest(GenerateRequest request) : request_(std::move(request)) {}

  GenerateRequest request_;
};

}  // namespace tokenmill
