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

namespace {

// Indices of `scores` by descending score, as ggml_argsort_top_k orders them (std::sort under
// "greater"), so that ties fall as llama.cpp's do.
std::vector<int32_t> Descending(std::span<const float> scores) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  return order;
}

// DeepSeek-V3's group-limited routing as build_moe_ffn masks it: each group of consecutive
// experts scores the sum of its two best (ggml_sum_rows: in double), and the experts outside
// the n_groups_used best groups become -inf.
void MaskAllButBestGroups(const ExpertConfig& c, std::span<float> selection) {
  const int per_group = c.n_expert / c.n_groups;
  std::vector<float> group_scores(static_cast<size_t>(c.n_groups));
  for (int g = 0; g < c.n_groups; ++g) {
    const std::span<const float> group = selection.subspan(static_cast<size_t>(g) * per_group,
                                                           static_cast<size_t>(per_group));
    const std::vector<int32_t> best = Descending(group);
    double sum = 0.0;
    for (int i = 0; i < std::min(2, per_group); ++i) sum += static_cast<double>(group[best[i]]);
    group_scores[static_cast<size_t>(g)] = static_cast<float>(sum);
  }
  const std::vector<int32_t> groups = Descending(group_scores);
  std::vector<bool> kept(static_cast<size_t>(c.n_groups), false);
  for (int i = 0; i < c.n_groups_used; ++i) kept[static_cast<size_t>(groups[i])] = true;
  for (int x = 0; x < c.n_expert; ++x) {
    if (!kept[static_cast<size_t>(x / per_group)]) selection[static_cast<size_t>(x)] = -INFINITY;
  }
}

}  // namespace

void RouteToken(const ExpertConfig& c, std::span<float> logits, std::span<int32_t> experts,
                std::span<float> weights, std::span<const float> selection_bias) {
  TM_CHECK_EQ(static_cast<int>(logits.size()), c.n_expert);
  TM_CHECK(selection_bias.empty() || selection_bias.size() == logits.size());
  TM_CHECK(static_cast<int>(experts.size()) == c.n_used &&
           static_cast<int>(weights.size()) == c.n_used);
  switch (c.gating) {
    case ExpertGating::kSoftmax: SoftmaxRowLikeGgml(logits); break;
    case ExpertGating::kSigmoid:
      for (float& v : logits) v = 1.0f / (1.0f + std::exp(-v));
      break;
    case ExpertGating::kSoftmaxSelected: break;
  }
  // The experts are chosen by the probs plus the selection bias, within the best groups;
  // their weights are the probs alone.
  std::span<const float> selection = logits;
  std::vector<float> biased;
  if (!selection_bias.empty() || c.n_groups > 1) {
    biased.assign(logits.begin(), logits.end());
    for (size_t i = 0; i < selection_bias.size(); ++i) biased[i] += selection_bias[i];
    if (c.n_groups > 1) MaskAllButBestGroups(c, biased);
    selection = biased;
  }
  // ggml_argsort_top_k: all indices sorted by descending score, then the first n_used.
  const std::vector<int32_t> sorted = Descending(selection);
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
