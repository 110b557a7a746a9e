#include "model/classifier.h"

#include <algorithm>
#include <cmath>

#include "kernels/dequantize.h"

namespace tokenmill {
namespace {

// w · x + bias (bias may be empty), each row dequantized as the file stores it.
std::vector<float> Apply(const WeightMatrix& w, std::span<const float> bias,
                         std::span<const float> x) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  std::vector<float> out(static_cast<size_t>(w.rows));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeReference(w.type, w.data + r * w.row_bytes, row);
    double sum = 0.0;
    for (size_t i = 0; i < row.size(); ++i) sum += static_cast<double>(row[i]) * x[i];
    out[static_cast<size_t>(r)] = static_cast<float>(sum);
    if (!bias.empty()) out[static_cast<size_t>(r)] += bias[static_cast<size_t>(r)];
  }
  return out;
}

}  // namespace

std::vector<float> Classify(const ModelConfig& config, const ClassifierWeights& head,
                            std::span<const float> pooled) {
  std::vector<float> x(pooled.begin(), pooled.end());
  if (head.dense.rows > 0) {
    x = Apply(head.dense, head.dense_bias, x);
    for (float& v : x) v = std::tanh(v);
  }
  if (head.out.rows > 0) x = Apply(head.out, head.out_bias, x);
  if (config.rank_softmax && !x.empty()) {
    const float max = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (float& v : x) sum += (v = std::exp(v - max));
    for (float& v : x) v = static_cast<float>(v / sum);
  }
  return x;
}

}  // namespace tokenmill
