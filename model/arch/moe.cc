#include "model/arch/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/check.h"
#include "kernels/cpu/elementwise.h"

namespace tokenmill {

void SoftmaxRowLikeGgml(std::span<float> x) {
  if (x.empty()) return;
  const float max = *std::max_element(x.begin(), x.end());
  const size_t full = x.size() - x.size() % 8;
  double sum = 0.0;
  for (size_t i = 0; i < full; i += 8) {
    float e[8];
    for (size_t l = 0; l < 8; ++l) x[i + l] = e[l] = GgmlVectorExpf(x[i + l] - max);
    // SSE's pairwise order: the halves, then lanes (0+2, 1+3), then those two.
    const float h0 = e[0] + e[4], h1 = e[1] + e[5], h2 = e[2] + e[6], h3 = e[3] + e[7];
    sum += static_cast<double>((h0 + h2) + (h1 + h3));
  }
  for (size_t i = full; i < x.size(); ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

void RouteToken(const ExpertConfig& c, std::span<float> logits, std::span<int32_t> experts,
                std::span<float> weights) {
  TM_CHECK_EQ(static_cast<int>(logits.size()), c.n_expert);
  TM_CHECK(static_cast<int>(experts.size()) == c.n_used &&
           static_cast<int>(weights.size()) == c.n_used);
  switch (c.gating) {
    case ExpertGating::kSoftmax: SoftmaxRowLikeGgml(logits); break;
    case ExpertGating::kSigmoid:
      for (float& v : logits) v = 1.0f / (1.0f + std::exp(-v));
      break;
    case ExpertGating::kSoftmaxSelected: break;
  }
  // ggml_argsort_top_k: all indices sorted by descending prob, then the first n_used.
  std::vector<int32_t> sorted(logits.size());
  std::iota(sorted.begin(), sorted.end(), 0);
  std::sort(sorted.begin(), sorted.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int k = 0; k < c.n_used; ++k) {
    experts[k] = sorted[k];
    weights[k] = logits[sorted[k]];
  }
  if (c.gating == ExpertGating::kSoftmaxSelected) SoftmaxRowLikeGgml(weights);
  if (c.normalize) {
    double sum = 0.0;  // ggml_sum_rows
    for (float w : weights) sum += static_cast<double>(w);
    const float divisor = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (float& w : weights) w /= divisor;
  }
  if (c.scale != 0.0f && c.scale != 1.0f) {
    for (float& w : weights) w *= c.scale;
  }
}

void ExpertGroups::Build(std::span<const int32_t> experts, int n_expert) {
  begin.assign(static_cast<size_t>(n_expert) + 1, 0);
  for (int32_t e : experts) {
    TM_CHECK(e >= 0 && e < n_expert);
    ++begin[static_cast<size_t>(e) + 1];
  }
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  order.resize(experts.size());
  std::vector<int32_t> next(begin.begin(), begin.end() - 1);
  for (size_t p = 0; p < experts.size(); ++p) order[next[experts[p]]++] = static_cast<int32_t>(p);
}

}  // namespace tokenmill
