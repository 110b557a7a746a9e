// CpuForwardBlocks' encoder blocks (cpu_blocks.h, forward_blocks.h): bert's inputs (token type
// and position rows), its LayerNorms and its ungated GELU feed-forward.
#include <algorithm>

#include "kernels/dequantize.h"
#include "model/arch/cpu_blocks.h"

namespace tokenmill {

void CpuForwardBlocks::AddEncoderInputs(const EncoderInputs& inputs) {
  const int64_t d = c_.n_embd;
  std::vector<float> position(static_cast<size_t>(d));
  for (int64_t t = 0; t < n_; ++t) {
    float* x = x_.data() + t * d;
    // As llama.cpp: (token + type) + position, each add rounded.
    if (!inputs.token_type.empty()) AddBias(x, inputs.token_type, 1);
    const WeightMatrix& p = inputs.position_embd;
    if (p.data == nullptr) continue;  // roped instead (nomic-bert)
    DequantizeReference(p.type, p.data + in_->batch.positions[t] * p.row_bytes, position);
    for (int64_t i = 0; i < d; ++i) x[i] = position[static_cast<size_t>(i)] + x[i];
  }
  Tap("inp_embd", -1, x_, n_, d);
}

void CpuForwardBlocks::LayerNorm(std::span<const float> weight, std::span<const float> bias,
                                 const char* name) {
  const int64_t d = c_.n_embd;
  ForTokens([&](int64_t b, int64_t e) {
    tokenmill::LayerNorm(x_.data() + b * d, weight, bias, c_.rms_eps, e - b, x_.data() + b * d);
  });
  std::copy(x_.begin(), x_.begin() + n_ * d, h_.begin());
  h_norm_ = nullptr;
  Tap(name, layer_, x_, n_, d);
}

void CpuForwardBlocks::GeluMlp(const WeightMatrix& up, std::span<const float> up_bias,
                               const WeightMatrix& down, std::span<const float> down_bias) {
  const int64_t n_ff = shape_.n_ff;
  MatmulOp(up, h_.data(), n_, up_.data());
  if (!up_bias.empty()) AddBias(up_.data(), up_bias, n_);
  Tap("ffn_up", layer_, up_, n_, n_ff);
  ForTokens([&](int64_t b, int64_t e) {
    GeluTanh(up_.data() + b * n_ff, (e - b) * n_ff, up_.data() + b * n_ff);
  });
  Tap("ffn_gelu", layer_, up_, n_, n_ff);
  MatmulOp(down, up_.data(), n_, proj_.data());
  if (!down_bias.empty()) AddBias(proj_.data(), down_bias, n_);
  Tap("ffn_out", layer_, proj_, n_, c_.n_embd);
}

}  // namespace tokenmill
