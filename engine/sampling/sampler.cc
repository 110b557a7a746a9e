#include "engine/sampling/sampler.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "engine/sampling/logits_processors.h"

namespace tokenmill {

RngKey SamplingContext::rng_key() const {
  return RngKey{.seed = params->seed.value_or(0),
                .sequence_index = static_cast<uint32_t>(params->sequence_index),
                .position = static_cast<uint64_t>(output_token_ids.size())};
}

SamplingContext NextTokenContext(const Request& request) {
  return SamplingContext{.params = &request.sampling,
                         .prompt_token_ids = request.prompt_token_ids(),
                         .output_token_ids = request.output_token_ids()};
}

bool PicksTheRawArgmax(const SamplingContext& context) {
  const SamplingParams& p = *context.params;
  return p.greedy() && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && p.logit_bias.empty() &&
         context.output_position() >= p.min_tokens;
}

Sampler::Sampler(std::vector<TokenId> end_of_generation_ids)
    : end_of_generation_ids_(std::move(end_of_generation_ids)) {}

void Sampler::ProcessLogits(std::span<const float> logits, const SamplingContext& context) {
  const SamplingParams& p = *context.params;
  logits_.assign(logits.begin(), logits.end());
  counts_.resize(logits.size(), 0);
  ApplyPenalties(logits_, context.prompt_token_ids, context.output_token_ids,
                 p.repetition_penalty, p.frequency_penalty, p.presence_penalty, counts_);
  if (context.output_position() < p.min_tokens) {
    if (!p.ignore_eos) MaskTokens(logits_, end_of_generation_ids_);
    MaskTokens(logits_, p.stop_token_ids);
  }
  ApplyLogitBias(logits_, p.logit_bias);
}

bool Sampler::ProcessedProbs(const SamplingContext& context) {
  const SamplingParams& p = *context.params;
  if (!SoftmaxWithTemperature(logits_, p.temperature, probs_)) return false;
  ApplyTopK(logits_, p.top_k, probs_);
  ApplyTopP(probs_, p.top_p, order_);
  ApplyMinP(probs_, p.min_p);
  return Normalize(probs_);
}

SampledToken Sampler::Sample(std::span<const float> logits, const SamplingContext& context) {
  const SamplingParams& p = *context.params;
  SampledToken out;
  if (PicksTheRawArgmax(context)) {
    out.token_id = Argmax(logits);  // the plain argmax, without copying the row
  } else if (p.greedy()) {
    ProcessLogits(logits, context);
    out.token_id = Argmax(logits_);
  } else {
    // Through the float distribution Draw sees, so both pick the same id for one uniform.
    float_probs_.resize(logits.size());
    ComputeProbs(logits, context, float_probs_);
    out.token_id = Draw(float_probs_, context, RngStream::kSample);
  }
  if (p.wants_logprobs()) out.logprobs = ComputeTokenLogprobs(logits, out.token_id, p.top_logprobs);
  return out;
}

void Sampler::ComputeProbs(std::span<const float> logits, const SamplingContext& context,
                           std::span<float> probs) {
  TM_CHECK_EQ(probs.size(), logits.size());
  ProcessLogits(logits, context);
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (context.params->greedy() || !ProcessedProbs(context)) {
    probs[static_cast<size_t>(context.params->greedy() ? Argmax(logits_) : Argmax(logits))] = 1.0f;
    return;
  }
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = static_cast<float>(probs_[i]);
}

TokenId Sampler::Draw(std::span<const float> weights, const SamplingContext& context,
                      RngStream stream) {
  TM_CHECK(!weights.empty());
  double total = 0.0;
  for (const float w : weights) total += w > 0.0f ? static_cast<double>(w) : 0.0;
  if (!(total > 0.0)) return Argmax(weights);
  const double target = Uniform(context, stream) * total;
  double cumulative = 0.0;
  TokenId last_positive = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0.0f)) continue;
    last_positive = static_cast<TokenId>(i);
    cumulative += static_cast<double>(weights[i]);
    if (target < cumulative) return static_cast<TokenId>(i);
  }
  return last_positive;
}

double Sampler::Uniform(const SamplingContext& context, RngStream stream) {
  return RandomUniform(context.rng_key(), stream);
}

}  // namespace tokenmill
