#include "engine/sampling/logits_processors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "common/check.h"

namespace tokenmill {
namespace {

bool InRow(size_t row_size, TokenId id) { return id >= 0 && static_cast<size_t>(id) < row_size; }

}  // namespace

void ApplyPenalties(std::span<float> logits, std::span<const TokenId> prompt,
                    std::span<const TokenId> output, float repetition, float frequency,
                    float presence, std::vector<int>& counts) {
  const bool repeat = repetition != 1.0f;
  const bool additive = frequency != 0.0f || presence != 0.0f;
  if (!repeat && !additive) return;
  TM_CHECK_EQ(counts.size(), logits.size());
  // counts[id]: -1 seen in the prompt only (and penalized), > 0 output occurrences.
  if (repeat) {
    for (const TokenId id : prompt) {
      if (!InRow(logits.size(), id) || counts[static_cast<size_t>(id)] != 0) continue;
      float& l = logits[static_cast<size_t>(id)];
      l = l > 0 ? l / repetition : l * repetition;
      counts[static_cast<size_t>(id)] = -1;
    }
  }
  for (const TokenId id : output) {
    if (!InRow(logits.size(), id)) continue;
    int& c = counts[static_cast<size_t>(id)];
    if (c == 0 && repeat) {
      float& l = logits[static_cast<size_t>(id)];
      l = l > 0 ? l / repetition : l * repetition;
    }
    c = c < 0 ? 1 : c + 1;
  }
  for (const TokenId id : output) {
    if (!InRow(logits.size(), id)) continue;
    int& c = counts[static_cast<size_t>(id)];
    if (c > 0 && additive) {
      logits[static_cast<size_t>(id)] -= frequency * static_cast<float>(c) + presence;
    }
    c = 0;
  }
  for (const TokenId id : prompt) {
    if (InRow(logits.size(), id)) counts[static_cast<size_t>(id)] = 0;
  }
}

void MaskTokens(std::span<float> logits, std::span<const TokenId> ids) {
  for (const TokenId id : ids) {
    if (InRow(logits.size(), id)) {
      logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    }
  }
}

void ApplyLogitBias(std::span<float> logits, std::span<const std::pair<TokenId, float>> bias) {
  for (const auto& [id, value] : bias) {
    if (InRow(logits.size(), id)) logits[static_cast<size_t>(id)] += value;
  }
}

// The id a left-to-right scan keeping the first strictly larger logit ends on, in two
// vector passes (the scan's index chain is serial): the largest logit that is not NaN, then
// its first position. A NaN first logit is never beaten in that scan.
TokenId Argmax(std::span<const float> logits) {
  TM_CHECK(!logits.empty());
  const float* x = logits.data();
  const size_t n = logits.size();
  if (std::isnan(x[0])) return 0;
  float best = x[0];
  size_t i = 0;
#if defined(__SSE2__)
  // max_ps(v, m) is v > m ? v : m lane by lane (a NaN v keeps m).
  constexpr size_t kStep = 16;
  __m128 m[4];
  for (__m128& v : m) v = _mm_set1_ps(best);
  for (; i + kStep <= n; i += kStep) {
    for (int k = 0; k < 4; ++k) m[k] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * k), m[k]);
  }
  float lanes[kStep];
  for (int k = 0; k < 4; ++k) _mm_storeu_ps(lanes + 4 * k, m[k]);
  for (float v : lanes) best = v > best ? v : best;
#endif
  for (size_t j = i; j < n; ++j) best = x[j] > best ? x[j] : best;
  i = 0;
#if defined(__SSE2__)
  const __m128 target = _mm_set1_ps(best);
  for (; i + kStep <= n; i += kStep) {
    int hits = 0;
    for (int k = 0; k < 4; ++k) {
      hits |= _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i + 4 * k), target)) << (4 * k);
    }
    if (hits != 0) {
      const int first = std::countr_zero(static_cast<unsigned>(hits));
      return static_cast<TokenId>(i + static_cast<size_t>(first));
    }
  }
#endif
  for (; i < n; ++i) {
    if (x[i] == best) return static_cast<TokenId>(i);
  }
  TM_CHECK(false) << "the largest logit " << best << " was not found";
  return 0;
}

bool SoftmaxWithTemperature(std::span<const float> logits, double temperature,
                            std::vector<double>& probs) {
  TM_CHECK_GT(temperature, 0.0);
  probs.assign(logits.size(), 0.0);
  double max = -std::numeric_limits<double>::infinity();
  for (const float l : logits) {
    if (std::isfinite(l)) max = std::max(max, static_cast<double>(l));
  }
  if (!std::isfinite(max)) return false;
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) continue;
    probs[i] = std::exp((static_cast<double>(logits[i]) - max) / temperature);
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;
  return true;
}

void ApplyTopK(std::span<const float> logits, int k, std::span<double> probs) {
  TM_CHECK_EQ(logits.size(), probs.size());
  if (k <= 0 || static_cast<size_t>(k) >= logits.size()) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(k - 1)];
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] < kth) probs[i] = 0.0;
  }
}

void ApplyTopP(std::span<double> probs, double top_p, std::vector<TokenId>& order) {
  if (top_p >= 1.0) return;
  order.clear();
  double total = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0) {
      order.push_back(static_cast<TokenId>(i));
      total += probs[i];
    }
  }
  if (order.empty()) return;
  const auto more_likely = [&](TokenId a, TokenId b) {
    const double pa = probs[static_cast<size_t>(a)];
    const double pb = probs[static_cast<size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  };
  // Sort only the head that holds top_p of the mass (a few hundred ids of a large
  // vocabulary, usually): the order is total, so the head is what a full sort would give.
  size_t head = std::min<size_t>(order.size(), 256);
  while (true) {
    std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(head) - 1,
                     order.end(), more_likely);
    std::sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(head), more_likely);
    double mass = 0.0;
    for (size_t i = 0; i < head; ++i) mass += probs[static_cast<size_t>(order[i])] / total;
    if (mass >= top_p || head == order.size()) break;
    head = std::min(order.size(), head * 4);
  }
  double before = 0.0;  // mass of the ids ranked above, as a fraction of the total
  for (size_t i = 0; i < order.size(); ++i) {
    double& p = probs[static_cast<size_t>(order[i])];
    if (i >= head || before >= top_p) {
      p = 0.0;
    } else {
      before += p / total;
    }
  }
}

void ApplyMinP(std::span<double> probs, double min_p) {
  if (min_p <= 0.0) return;
  double max = 0.0;
  for (const double p : probs) max = std::max(max, p);
  const double threshold = min_p * max;
  for (double& p : probs) {
    if (p < threshold) p = 0.0;
  }
}

bool Normalize(std::span<double> probs) {
  double sum = 0.0;
  for (const double p : probs) sum += p;
  if (!(sum > 0.0)) return false;
  for (double& p : probs) p /= sum;
  return true;
}

}  // namespace tokenmill
