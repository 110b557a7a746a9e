#include "engine/speculative/adaptive_k.h"

#include <algorithm>

namespace tokenmill {

double AdaptiveK::TokensPerCost(int k, double acceptance, double row_cost, int batch_size) {
  double tokens = 0.0;
  double p = 1.0;
  for (int i = 0; i <= k; ++i) {
    tokens += p;  // the i-th token comes when the i drafts before it were all accepted
    p *= acceptance;
  }
  const int other_rows = std::max(0, batch_size - 1);
  return (other_rows + tokens) / (1.0 + row_cost * (other_rows + k));
}

int AdaptiveK::Next(int k_max, double row_cost, int batch_size) {
  int best_k = 0;
  double best = TokensPerCost(0, acceptance_, row_cost, batch_size);
  for (int k = 1; k <= k_max; ++k) {
    const double rate = TokensPerCost(k, acceptance_, row_cost, batch_size);
    if (rate > best * (1.0 + 1e-9)) {
      best = rate;
      best_k = k;
    }
  }
  if (best_k > 0 || k_max == 0) {
    steps_at_zero_ = 0;
    return best_k;
  }
  if (++steps_at_zero_ < kProbeInterval) return 0;
  steps_at_zero_ = 0;
  return 1;
}

void AdaptiveK::Observe(int proposed, int accepted) {
  if (proposed <= 0) return;
  const double rate = static_cast<double>(accepted) / proposed;
  acceptance_ = (1.0 - kSmoothing) * acceptance_ + kSmoothing * rate;
}

}  // namespace tokenmill
