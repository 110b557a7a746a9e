#include "engine/embedding_pooler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/check.h"

namespace tokenmill {

PromptUse PromptUseOf(Pooling pooling) {
  return pooling == Pooling::kLast ? PromptUse::kEmbedLastRow : PromptUse::kEmbedEveryRow;
}

EmbeddingPooler::EmbeddingPooler(EmbeddingParams params, int n_embd, Head head)
    : params_(params),
      n_embd_(n_embd),
      head_(std::move(head)),
      sum_(static_cast<size_t>(n_embd), 0.0) {
  TM_CHECK(params.pooling == Pooling::kMean || params.pooling == Pooling::kCls ||
           params.pooling == Pooling::kLast)
      << "pooling " << PoolingName(params.pooling);
  TM_CHECK(!params.classify || head_) << "classify without a head";
}

void EmbeddingPooler::Add(int first_position, std::span<const float> rows) {
  const size_t d = static_cast<size_t>(n_embd_);
  TM_CHECK_EQ(rows.size() % d, 0u);
  // Position 0 again: a recompute after preemption. The last row replaces any before it.
  if (first_position == 0 || params_.pooling == Pooling::kLast) {
    std::fill(sum_.begin(), sum_.end(), 0.0);
    num_rows_ = 0;
  }
  size_t count = rows.size() / d;
  if (params_.pooling == Pooling::kCls) {
    if (first_position != 0) return;
    count = std::min<size_t>(count, 1);
  }
  for (size_t r = 0; r < count; ++r) {
    for (size_t i = 0; i < d; ++i) sum_[i] += rows[r * d + i];
  }
  num_rows_ += static_cast<int>(count);
}

std::vector<float> EmbeddingPooler::Result() const {
  if (num_rows_ == 0) return {};
  std::vector<float> out(sum_.size());
  if (params_.classify) {
    for (size_t i = 0; i < sum_.size(); ++i) out[i] = static_cast<float>(sum_[i] / num_rows_);
    return head_(out);
  }
  double norm = 0.0;
  for (size_t i = 0; i < sum_.size(); ++i) {
    out[i] = static_cast<float>(sum_[i] / num_rows_);
    norm += static_cast<double>(out[i]) * out[i];
  }
  if (params_.normalize && norm > 0.0) {
    const double scale = 1.0 / std::sqrt(norm);
    for (float& value : out) value = static_cast<float>(value * scale);
  }
  return out;
}

}  // namespace tokenmill
