#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/half.h"

namespace tokenmill {

void RmsNorm(const float* x, std::span<const float> weight, float eps, int64_t n_rows,
             float* out) {
  const int64_t n = static_cast<int64_t>(weight.size());
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    // As llama.cpp: float squares summed in double, the scale in float.
    double sum_squares = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum_squares / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * scale * weight[static_cast<size_t>(i)];
  }
}

void LayerNorm(const float* x, std::span<const float> weight, std::span<const float> bias,
               float eps, int64_t n_rows, float* out) {
  const int64_t n = static_cast<int64_t>(weight.size());
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    double sum_squares = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = xr[i] - mean;
      o[i] = v;
      sum_squares += static_cast<double>(v * v);
    }
    const float variance = static_cast<float>(sum_squares / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(variance + eps);
    for (int64_t i = 0; i < n; ++i) {
      o[i] = o[i] * scale * weight[static_cast<size_t>(i)] + bias[static_cast<size_t>(i)];
    }
  }
}

std::array<float, 2> YarnCorrectionDims(int n_rot, int original_context, float freq_base,
                                        float beta_fast, float beta_slow) {
  // In float, as ggml_rope_yarn_corr_dim: the dimension whose pair turns `rotations` times.
  auto dim = [&](float rotations) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(original_context) /
                    (rotations * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(freq_base));
  };
  return {std::max(0.0f, std::floor(dim(beta_fast))),
          std::min(static_cast<float>(n_rot - 1), std::ceil(dim(beta_slow)))};
}

float RopeCosSinScale(const RopeParams& p) {
  return p.ext_factor != 0.0f
             ? p.attn_factor * std::fma(0.1f, std::log(1.0f / p.position_scale), 1.0f)
             : p.attn_factor;
}

void ApplyRope(const RopeParams& p, std::span<const int32_t> positions, int n_heads, float* x) {
  TM_CHECK(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
  const int half = p.n_rot / 2;
  TM_CHECK(p.freq_factors.empty() || static_cast<int>(p.freq_factors.size()) == half);
  // As llama.cpp (ggml_rope_cache_init, rope_yarn): the angle of pair i is position *
  // base^(-2/n_rot), multiplied i times in float, divided by the pair's frequency factor,
  // then scaled (with YaRN, mixed with the unscaled angle by the pair's ramp).
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  const bool yarn = p.ext_factor != 0.0f;
  const float mscale = RopeCosSinScale(p);
  for (size_t t = 0; t < positions.size(); ++t) {
    float theta_base = static_cast<float>(positions[t]);
    float* row = x + static_cast<int64_t>(t) * n_heads * p.head_dim;
    for (int i = 0; i < half; ++i, theta_base *= theta_scale) {
      const float factor = p.freq_factors.empty() ? 1.0f : p.freq_factors[static_cast<size_t>(i)];
      const float theta_extrap = theta_base / factor;
      float theta = p.position_scale * theta_extrap;
      if (yarn) {
        const float y = (static_cast<float>(i) - p.corr_low) /
                        std::max(0.001f, p.corr_high - p.corr_low);
        const float ramp_mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
        theta = std::fma(theta, 1.0f - ramp_mix, theta_extrap * ramp_mix);
      }
      const float c = std::cos(theta) * mscale;
      const float s = std::sin(theta) * mscale;
      const int i0 = p.style == RopeStyle::kNeox ? i : 2 * i;
      const int i1 = p.style == RopeStyle::kNeox ? i + half : 2 * i + 1;
      for (int h = 0; h < n_heads; ++h) {
        float* head = row + h * p.head_dim;
        const float a = head[i0];
        const float b = head[i1];
        head[i0] = std::fma(a, c, -(b * s));
        head[i1] = std::fma(a, s, b * c);
      }
    }
  }
}

void SwiGlu(const CpuContext& ctx, const float* gate, const float* up, int64_t n_rows,
            int64_t row_size, float* out) {
  ctx.kernels->swiglu(gate, up, n_rows, row_size, out);
}

void AddLowRank(const CpuContext& ctx, const float* coeffs, int64_t n_tokens, int64_t rank,
                const float* bt, int64_t n, float* const* y) {
  ctx.kernels->add_low_rank(coeffs, n_tokens, rank, bt, n, y);
}

void AddLowRank(const CpuContext& ctx, const float* coeffs, int64_t n_tokens, int64_t rank,
                const uint16_t* bt, int64_t n, float* const* y) {
  ctx.kernels->add_low_rank_f16(coeffs, n_tokens, rank, bt, n, y);
}

namespace {

// GELU-tanh of every f16 value, as f16: ggml's ggml_table_gelu_f16. ggml's C is compiled
// with fused multiply-adds contracted (GCC's default outside ISO mode), which makes
// 1 + 0.044715·x·x one fma; measured against llama-cpp-python's build, where the unfused sum
// rounds some entries (x = -1.999) to the neighbouring f16.
std::vector<uint16_t> MakeGeluTable() {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  std::vector<uint16_t> table((1 << 16) + 1);
  for (uint32_t i = 0; i < 1 << 16; ++i) {
    const float x = HalfToFloat(static_cast<uint16_t>(i));
    const float inner = std::fma(kCoefA * x, x, 1.0f);
    table[i] = FloatToHalf(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * inner)));
  }
  return table;
}

// GELU-tanh of x as ggml's CPU backend computes it (GGML_GELU_FP16): 0 below -10, x above
// 10, else the table's value of x rounded to f16.
float GeluTanhOne(const std::vector<uint16_t>& table, float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return HalfToFloat(table[FloatToHalf(x)]);
}

const std::vector<uint16_t>& GeluTable() {
  static const std::vector<uint16_t> table = MakeGeluTable();  // immutable once made
  return table;
}

}  // namespace

void GeluTanhGlu(const float* gate, const float* up, int64_t n, float* out) {
  const std::vector<uint16_t>& table = GeluTable();
  for (int64_t i = 0; i < n; ++i) {
    out[i] = gate[i] <= -10.0f ? 0.0f : GeluTanhOne(table, gate[i]) * up[i];
  }
}

void GeluTanhGlu(const CpuContext& ctx, const float* gate, const float* up, int64_t n, float* out) {
  ctx.kernels->gelu_tanh_glu(gate, up, n, out);
}

const uint16_t* GeluHalfTable() { return GeluTable().data(); }

void GeluTanh(const float* x, int64_t n, float* out) {
  const std::vector<uint16_t>& table = GeluTable();
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanhOne(table, x[i]);
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void AddBias(float* x, std::span<const float> bias, int64_t n_rows) {
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[static_cast<size_t>(i)];
  }
}

void SwiGluOai(const float* gate, const float* up, int64_t n, float alpha, float limit,
               float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], limit);
    const float y = std::clamp(up[i], -limit, limit);
    out[i] = x / (1.0f + std::exp(alpha * (-x))) * (y + 1.0f);
  }
}

void SoftmaxInPlace(std::span<float> x, float sink) {
  if (x.empty()) return;
  const float max = std::max(*std::max_element(x.begin(), x.end()), sink);
  double sum = sink == -INFINITY ? 0.0 : std::exp(sink - max);
  for (float& v : x) {
    v = std::exp(v - max);
    sum += v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

void SoftmaxLikeGgml(const CpuContext& ctx, std::span<float> x, float sink) {
  ctx.kernels->softmax_like_ggml(x, sink);
}

}  // namespace tokenmill
