// Picks each next token of a request from a row of logits, per request and independent of
// the batch: penalties -> min_tokens mask -> logit_bias -> temperature -> top-k -> top-p ->
// min-p -> a draw with the counter-based RNG at (seed, sequence index, output position)
// (SamplingParams documents each field). Greedy requests (temperature 0) take the argmax of
// the processed logits, which is the raw argmax when no penalty or bias is set.
//
// Speculative decoding builds on the same pieces: ComputeProbs gives p, the exact
// distribution Sample draws from; Uniform and Draw use the request's RNG, so
//   Sample(logits, c).token_id == Draw(ComputeProbs(logits, c), c, RngStream::kSample)
// and a rejection sampler may call Uniform(c, kAccept) and Draw(residual, c, kResample).
//
// One Sampler per engine thread: it keeps scratch buffers, so it is not thread-safe.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "cache/types.h"
#include "engine/sampling/rng.h"
#include "engine/sampling/token_logprobs.h"
#include "scheduler/request.h"

namespace tokenmill {

// What the sampler reads for one row of one sequence.
struct SamplingContext {
  const SamplingParams* params = nullptr;
  std::span<const TokenId> prompt_token_ids;
  // Generated before this row, accepted drafts included; its size is the output position
  // the RNG is keyed on.
  std::span<const TokenId> output_token_ids;

  int output_position() const { return static_cast<int>(output_token_ids.size()); }
  RngKey rng_key() const;
};

// The context for the next token of `request` (its verified tokens).
SamplingContext NextTokenContext(const Request& request);

// Whether Sample picks the raw logits' argmax for `context`: greedy with no penalty, bias or
// min_tokens mask in effect. Then (without logprobs) a row's argmax is all a step needs of it
// (ForwardBackend::RunGreedy); it stays true for the rows after `context`'s.
bool PicksTheRawArgmax(const SamplingContext& context);

struct SampledToken {
  TokenId token_id = 0;
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them
};

class Sampler {
 public:
  // `end_of_generation_ids` are masked while a request (without ignore_eos) is below its
  // min_tokens.
  explicit Sampler(std::vector<TokenId> end_of_generation_ids = {});

  // The next token for a row of logits (one float per vocabulary id), and its logprobs.
  SampledToken Sample(std::span<const float> logits, const SamplingContext& context);

  // The processed distribution `context` samples from, into `probs` (the row's size; sums
  // to 1). Greedy: 1 at the processed argmax, 0 elsewhere.
  void ComputeProbs(std::span<const float> logits, const SamplingContext& context,
                    std::span<float> probs);

  // An id drawn from `weights` (non-negative, not all 0, need not sum to 1) by inverse CDF
  // in id order with Uniform(context, stream). All 0: the argmax of weights (id 0).
  static TokenId Draw(std::span<const float> weights, const SamplingContext& context,
                      RngStream stream);

  // The request's uniform in [0, 1) for this row and stream.
  static double Uniform(const SamplingContext& context, RngStream stream);

 private:
  // The processed logits (penalties, min_tokens mask, bias) into logits_.
  void ProcessLogits(std::span<const float> logits, const SamplingContext& context);
  // probs_ from logits_ for a non-greedy request; false when nothing is left to draw from.
  bool ProcessedProbs(const SamplingContext& context);

  std::vector<TokenId> end_of_generation_ids_;
  // Scratch, reused row after row.
  std::vector<float> logits_;
  std::vector<double> probs_;
  std::vector<int> counts_;
  std::vector<TokenId> order_;
  std::vector<float> float_probs_;
};

}  // namespace tokenmill
