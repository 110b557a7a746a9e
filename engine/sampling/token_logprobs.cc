#include "engine/sampling/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/check.h"

namespace tokenmill {

TokenLogprobs ComputeTokenLogprobs(std::span<const float> logits, TokenId chosen, int top_n) {
  TM_CHECK(!logits.empty());
  TM_CHECK(chosen >= 0 && static_cast<size_t>(chosen) < logits.size());
  double max = -std::numeric_limits<double>::infinity();
  for (const float l : logits) max = std::max(max, static_cast<double>(l));
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = max + std::log(sum);
  const auto logprob = [&](size_t id) {
    return static_cast<float>(static_cast<double>(logits[id]) - log_z);
  };

  // vLLM reports the chosen token's rank in the whole vocabulary, inside the top or not.
  const float chosen_logit = logits[static_cast<size_t>(chosen)];
  int rank = 1;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (logits[id] > chosen_logit ||
        (logits[id] == chosen_logit && id < static_cast<size_t>(chosen))) {
      ++rank;
    }
  }
  TokenLogprobs out;
  out.chosen = {.token_id = chosen, .logprob = logprob(static_cast<size_t>(chosen)), .rank = rank};
  const size_t n = std::min(logits.size(), static_cast<size_t>(std::max(top_n, 0)));
  if (n == 0) return out;
  std::vector<TokenId> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), ids.end(),
                    [&](TokenId a, TokenId b) {
                      const float la = logits[static_cast<size_t>(a)];
                      const float lb = logits[static_cast<size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.top.push_back({.token_id = ids[i],
                       .logprob = logprob(static_cast<size_t>(ids[i])),
                       .rank = static_cast<int>(i) + 1});
  }
  return out;
}

}  // namespace tokenmill
