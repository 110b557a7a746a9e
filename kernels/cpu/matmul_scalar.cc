// Portable kernels: the same integer arithmetic as the SIMD ones, in plain loops.
#include <cstring>

#include "kernels/cpu/attend_impl.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/half.h"

namespace tokenmill::internal {
namespace {

template <typename Block, typename BlockDot>
void QuantizedRange(const MatmulRange& m, BlockDot block_dot) {
  const WeightMatrix& w = *m.w;
  const int64_t blocks = w.cols / 32;
  const auto* x = static_cast<const Q8ActivationBlock*>(m.x);
  for (int64_t r = m.row_begin; r < m.row_end; ++r) {
    const auto* row = reinterpret_cast<const Block*>(w.data + r * w.row_bytes);
    for (int64_t t = 0; t < m.n_tokens; ++t) {
      const Q8ActivationBlock* xt = x + t * blocks;
      float sum = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) sum += block_dot(row[b], xt[b]);
      m.y[t * m.y_stride + r] = sum;
    }
  }
}

void Q4_0Range(const MatmulRange& m) {
  QuantizedRange<BlockQ4_0>(m, [](const BlockQ4_0& w, const Q8ActivationBlock& a) {
    int32_t dot = 0;
    for (int j = 0; j < 16; ++j) {
      dot += ((w.qs[j] & 0x0f) - 8) * a.q[j] + ((w.qs[j] >> 4) - 8) * a.q[j + 16];
    }
    return HalfToFloat(w.d) * a.d * static_cast<float>(dot);
  });
}

void Q4_1Range(const MatmulRange& m) {
  QuantizedRange<BlockQ4_1>(m, [](const BlockQ4_1& w, const Q8ActivationBlock& a) {
    int32_t dot = 0;
    for (int j = 0; j < 16; ++j) dot += (w.qs[j] & 0x0f) * a.q[j] + (w.qs[j] >> 4) * a.q[j + 16];
    return HalfToFloat(w.d) * a.d * static_cast<float>(dot) +
           HalfToFloat(w.m) * a.scaled_sum;
  });
}

void Q8_0Range(const MatmulRange& m) {
  QuantizedRange<BlockQ8_0>(m, [](const BlockQ8_0& w, const Q8ActivationBlock& a) {
    int32_t dot = 0;
    for (int j = 0; j < 32; ++j) dot += w.qs[j] * a.q[j];
    return HalfToFloat(w.d) * a.d * static_cast<float>(dot);
  });
}

template <typename Element, typename ToFloat>
void FloatRange(const MatmulRange& m, ToFloat to_float) {
  const WeightMatrix& w = *m.w;
  const auto* x = static_cast<const float*>(m.x);
  for (int64_t r = m.row_begin; r < m.row_end; ++r) {
    const auto* row = reinterpret_cast<const Element*>(w.data + r * w.row_bytes);
    for (int64_t t = 0; t < m.n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) sum += to_float(row[c]) * xt[c];
      m.y[t * m.y_stride + r] = sum;
    }
  }
}

void F32Range(const MatmulRange& m) {
  FloatRange<float>(m, [](float v) { return v; });
}
void F16Range(const MatmulRange& m) {
  FloatRange<uint16_t>(m, [](uint16_t v) { return HalfToFloat(v); });
}
void Bf16Range(const MatmulRange& m) {
  FloatRange<uint16_t>(m, [](uint16_t v) { return Bf16ToFloat(v); });
}

float ScalarDotF16(const float* a, const uint16_t* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * HalfToFloat(b[i]);
  return sum;
}
float ScalarDotF32(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
void ScalarAxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * HalfToFloat(x[i]);
}
void ScalarAxpyF32(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

float ScalarDotI8(const float* a, const int8_t* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * static_cast<float>(b[i]);
  return sum;
}
void ScalarAxpyI8(float alpha, const int8_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * static_cast<float>(x[i]);
}

struct ScalarOps {
  static constexpr auto DotF16 = ScalarDotF16;
  static constexpr auto DotF32 = ScalarDotF32;
  static constexpr auto DotI8 = ScalarDotI8;
  static constexpr auto AxpyF16 = ScalarAxpyF16;
  static constexpr auto AxpyF32 = ScalarAxpyF32;
  static constexpr auto AxpyI8 = ScalarAxpyI8;
  static float RoundToHalf(float x) { return HalfToFloat(FloatToHalf(x)); }
  template <typename Offset>
  static bool AccumulateV(const AttendArgs&, const Offset&) { return false; }
};

void Attend(const AttendArgs& args) { AttendWith<ScalarOps>(args); }

}  // namespace

const CpuKernelTable& ScalarKernelTable() {
  static constexpr CpuKernelTable kTable = {
      CpuIsa::kScalar, F32Range, F16Range, Bf16Range, Q8_0Range, Q4_0Range, Q4_1Range,
      ScalarDotF16,    ScalarDotF32, ScalarAxpyF16, ScalarAxpyF32, Attend, QuantizeActivations,
  };
  return kTable;
}

}  // namespace tokenmill::internal
