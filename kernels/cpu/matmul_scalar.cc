// Portable kernels: the same integer arithmetic as the SIMD ones, in plain loops.
#include <cmath>
#include <cstring>

#include "kernels/cpu/attend_impl.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/half.h"

namespace tokenmill::internal {
namespace {

// ggml's order for one (row, token), in plain loops: `lanes` gives a block's 8 integer
// dot products of 4 bytes each and its weight scale (and minimum); see matmul.h.
template <typename Block, bool kHasMin, typename BlockLanes>
void QuantizedRange(const MatmulRange& m, BlockLanes block_lanes) {
  const WeightMatrix& w = *m.w;
  const int64_t blocks = w.cols / 32;
  const auto* x = static_cast<const Q8TokenGroupBlock*>(m.x);
  for (int64_t r = m.row_begin; r < m.row_end; ++r) {
    const auto* row = reinterpret_cast<const Block*>(w.data + r * w.row_bytes);
    for (int64_t t = 0; t < m.n_tokens; ++t) {
      const Q8TokenGroupBlock* xg = x + (t / kTokenGroup) * blocks;
      const int i = static_cast<int>(t % kTokenGroup);
      float acc[8] = {};
      float min = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t lanes[8];
        block_lanes(row[b], xg[b].q[i], lanes);
        // f16 × f16: exact in float, so it does not matter where it is rounded.
        const float scale = HalfToFloat(row[b].d) * xg[b].d[i];
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(scale, static_cast<float>(lanes[k]), acc[k]);
        if constexpr (kHasMin) min += HalfToFloat(row[b].m) * xg[b].scaled_sum[i];
      }
      float half[4];
      for (int k = 0; k < 4; ++k) half[k] = acc[k] + acc[k + 4];
      const float sum = (half[0] + half[2]) + (half[1] + half[3]);
      m.y[t * m.y_stride + r] = kHasMin ? sum + min : sum;
    }
  }
}

// Element j of a 4-bit block: the low nibble of qs[j] for j < 16, else the high nibble of
// qs[j - 16].
inline int Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }

void Q4_0Range(const MatmulRange& m) {
  QuantizedRange<BlockQ4_0, false>(m, [](const BlockQ4_0& w, const int8_t* a, int32_t* lanes) {
    for (int k = 0; k < 8; ++k) {
      lanes[k] = 0;
      for (int j = 4 * k; j < 4 * k + 4; ++j) lanes[k] += (Nibble(w.qs, j) - 8) * a[j];
    }
  });
}

}  // namespace

// The kRowGroups16 order (matmul.h): per block one exact integer dot product, converted
// once, then acc = fma(d_w · d_a, dot, acc) and, for Q4_1, acc = fma(m_w, s_a, acc).
void RowGroupsRange(const MatmulRange& m) {
  const WeightMatrix& w = *m.w;
  const bool q4_1 = w.type == TensorType::kQ4_1;
  const int64_t blocks = w.cols / 32;
  const auto* x = static_cast<const Q8TokenGroupBlock*>(m.x);
  for (int64_t r = m.row_begin; r < m.row_end; ++r) {
    const int64_t first_block = (r / kRowGroup) * blocks;
    const int lane = static_cast<int>(r % kRowGroup);
    for (int64_t t = 0; t < m.n_tokens; ++t) {
      const Q8TokenGroupBlock* xg = x + (t / kTokenGroup) * blocks;
      const int i = static_cast<int>(t % kTokenGroup);
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* a = xg[b].q[i];
        int32_t dot = 0;
        uint16_t d_w, m_w = 0;
        if (q4_1) {
          const BlockQ4_1x16& wb = reinterpret_cast<const BlockQ4_1x16*>(w.data)[first_block + b];
          for (int k = 0; k < 4; ++k) {
            for (int e = 0; e < 4; ++e) {
              const uint8_t byte = wb.qs[k][4 * lane + e];
              dot += (byte & 0x0f) * a[4 * k + e] + (byte >> 4) * a[16 + 4 * k + e];
            }
          }
          d_w = wb.d[lane];
          m_w = wb.m[lane];
        } else {
          const BlockQ8_0x16& wb = reinterpret_cast<const BlockQ8_0x16*>(w.data)[first_block + b];
          for (int k = 0; k < 8; ++k) {
            for (int e = 0; e < 4; ++e) dot += (wb.qs[k][4 * lane + e] - 128) * a[4 * k + e];
          }
          d_w = wb.d[lane];
        }
        // f16 × f16: exact in float.
        acc = std::fma(HalfToFloat(d_w) * xg[b].d[i], static_cast<float>(dot), acc);
        if (q4_1) acc = std::fma(HalfToFloat(m_w), xg[b].scaled_sum[i], acc);
      }
      m.y[t * m.y_stride + r] = acc;
    }
  }
}

namespace {

void Q4_1Range(const MatmulRange& m) {
  if (m.w->layout == WeightLayout::kRowGroups16) {
    RowGroupsRange(m);
    return;
  }
  QuantizedRange<BlockQ4_1, true>(m, [](const BlockQ4_1& w, const int8_t* a, int32_t* lanes) {
    for (int k = 0; k < 8; ++k) {
      lanes[k] = 0;
      for (int j = 4 * k; j < 4 * k + 4; ++j) lanes[k] += Nibble(w.qs, j) * a[j];
    }
  });
}

void Q8_0Range(const MatmulRange& m) {
  if (m.w->layout == WeightLayout::kRowGroups16) {
    RowGroupsRange(m);
    return;
  }
  QuantizedRange<BlockQ8_0, false>(m, [](const BlockQ8_0& w, const int8_t* a, int32_t* lanes) {
    for (int k = 0; k < 8; ++k) {
      lanes[k] = 0;
      for (int j = 4 * k; j < 4 * k + 4; ++j) lanes[k] += w.qs[j] * a[j];
    }
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

// As ggml_vec_dot_f32 (matmul_simd.inc, F32LikeGgmlKernel): 32 fma lanes, its reduction
// order, the elements past the last full 32 one by one in float.
void F32Range(const MatmulRange& m) {
  const WeightMatrix& w = *m.w;
  const auto* x = static_cast<const float*>(m.x);
  const int64_t full = w.cols - w.cols % 32;
  for (int64_t r = m.row_begin; r < m.row_end; ++r) {
    const auto* row = reinterpret_cast<const float*>(w.data + r * w.row_bytes);
    for (int64_t t = 0; t < m.n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      float lane[32] = {};
      for (int64_t c = 0; c < full; c += 32) {
        for (int l = 0; l < 32; ++l) lane[l] = std::fma(row[c + l], xt[c + l], lane[l]);
      }
      float v[8];
      for (int l = 0; l < 8; ++l) v[l] = (lane[l] + lane[16 + l]) + (lane[8 + l] + lane[24 + l]);
      const float h0 = v[0] + v[4], h1 = v[1] + v[5], h2 = v[2] + v[6], h3 = v[3] + v[7];
      float sum = full > 0 ? (h0 + h1) + (h2 + h3) : 0.0f;
      for (int64_t c = full; c < w.cols; ++c) sum += row[c] * xt[c];
      m.y[t * m.y_stride + r] = sum;
    }
  }
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
