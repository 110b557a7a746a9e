// The steps of sampling, each a pure function over one row of logits (or probabilities),
// one vocabulary entry per id. The Sampler chains them in the order SamplingParams states;
// tests check each against NumPy. Ids outside the row are ignored.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "cache/types.h"

namespace tokenmill {

// Repetition penalty over every id in `prompt` or `output` (a positive logit divided by
// `repetition`, a negative one multiplied), then, over `output` only,
// logit -= frequency * count + presence * (count > 0). `counts` is scratch of the row's
// size, all zero on entry and on return.
void ApplyPenalties(std::span<float> logits, std::span<const TokenId> prompt,
                    std::span<const TokenId> output, float repetition, float frequency,
                    float presence, std::vector<int>& counts);

// Sets these ids to -infinity (min_tokens: end-of-generation and stop ids).
void MaskTokens(std::span<float> logits, std::span<const TokenId> ids);

// logit += bias for each (id, bias).
void ApplyLogitBias(std::span<float> logits, std::span<const std::pair<TokenId, float>> bias);

// The highest logit; the lowest id wins a tie, so the choice never depends on the batch.
TokenId Argmax(std::span<const float> logits);

// softmax(logits / temperature) in double into `probs` (resized); -infinity gives 0.
// Returns false when no logit is finite (probs all 0).
bool SoftmaxWithTemperature(std::span<const float> logits, double temperature,
                            std::vector<double>& probs);

// Keeps the ids whose logit is at least the k-th largest (ties at the edge stay); zeroes
// the other probabilities. k <= 0 or k >= the row size: nothing changes.
void ApplyTopK(std::span<const float> logits, int k, std::span<double> probs);

// Keeps the most likely ids, in order of probability (ties: lower id first), while the
// probability mass before each is below top_p (so at least one stays); zeroes the rest.
// top_p >= 1: nothing changes. `order` is scratch.
void ApplyTopP(std::span<double> probs, double top_p, std::vector<TokenId>& order);

// Zeroes probabilities below min_p times the largest one. min_p <= 0: nothing changes.
void ApplyMinP(std::span<double> probs, double min_p);

// Scales `probs` to sum to 1; false when they sum to 0.
bool Normalize(std::span<double> probs);

}  // namespace tokenmill
