#include "engine/sampler.h"

#include "common/check.h"

namespace tokenmill {

TokenId Argmax(std::span<const float> logits) {
  TM_CHECK(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<TokenId>(best);
}

TokenId GreedySampler::Sample(std::span<const float> logits, const Request& /*request*/) {
  return Argmax(logits);
}

}  // namespace tokenmill
