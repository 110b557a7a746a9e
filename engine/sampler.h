// Picks the next token from a row of logits. Greedy (argmax) for now; the full sampler
// (temperature, top-k/p, penalties, seeds) comes with the sampling issue behind this seam.
#pragma once

#include <span>

#include "cache/types.h"
#include "scheduler/request.h"

namespace tokenmill {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // `logits` has one float per vocabulary id; `request` carries the sampling parameters
  // and the tokens so far.
  virtual TokenId Sample(std::span<const float> logits, const Request& request) = 0;
};

// The highest logit; the lowest id wins a tie, so the choice never depends on the batch.
class GreedySampler final : public Sampler {
 public:
  TokenId Sample(std::span<const float> logits, const Request& request) override;
};

TokenId Argmax(std::span<const float> logits);

}  // namespace tokenmill
