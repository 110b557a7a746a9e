// The loop of one paged-attention unit (AttendArgs), written once over an ISA's dot and
// axpy primitives (internal to kernels/cpu; included by each ISA's kernel file).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/half.h"

namespace tokenmill::internal {

// Ops: static DotF32, DotI8 (float(const float*, const T*, int64_t)), AxpyF16,
// AxpyF32, AxpyI8 (void(float, const T*, float*, int64_t)), RoundToHalf (float(float),
// round to nearest even) and AccumulateV (out[0..d) = Σ_j p[j] · V row j, in order of j,
// or false when the ISA has no special case for this head size and KV type).
//
// int8 rows are dequantized in registers: the scale of a row multiplies its dot product
// (K) or its probability (V), so Σ q·k·s = s·Σ q·k needs no float copy of the row.
//
// f16 K/V are computed as llama.cpp's CPU backend computes its (non-flash) attention, bit
// for bit: each K·q and each output element is a ggml_vec_dot_f16 (32 lanes of fused
// multiply-adds, element i in lane i mod 32, lanes added in AVX2's tree order, the elements
// past the last full 32 added in double), the softmax is SoftmaxLikeGgml, and for V the
// positions play the elements' part (llama.cpp keeps V transposed; its KV length is a
// multiple of 32, the masked positions adding exact zeros).

// Element offset of position pos's K/V row for a's KV head (through its block table).
inline int64_t KvRowOffset(const AttendArgs& a, int32_t pos) {
  const int64_t slot =
      static_cast<int64_t>(a.blocks[pos / a.block_size]) * a.block_size + pos % a.block_size;
  return slot * a.n_kv_heads * a.head_dim + a.kv_head * a.head_dim;
}

// The 32 lanes of ggml_vec_dot_f16's accumulators (4 vectors of 8) added as it adds them.
inline float ReduceGgmlLanes(const float* lane) {
  float x[8];
  for (int l = 0; l < 8; ++l) x[l] = (lane[l] + lane[16 + l]) + (lane[8 + l] + lane[24 + l]);
  const float h0 = x[0] + x[4], h1 = x[1] + x[5], h2 = x[2] + x[6], h3 = x[3] + x[7];
  return (h0 + h1) + (h2 + h3);
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// The same sums in registers: (a0 + a2) + (a1 + a3), halves, then pairs twice.
inline float ReduceGgmlLanes(const __m256 (&acc)[4]) {
  const __m256 x = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  h = _mm_hadd_ps(h, h);  // h0 + h1, h2 + h3
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

// ReduceGgmlLanes for 8 adjacent output elements at once: lane l of element i + e is
// lanes[l * d + i + e].
inline __m256 ReduceGgmlLanes8(const float* lanes, int64_t d) {
  auto at = [&](int l) { return _mm256_loadu_ps(lanes + l * d); };
  __m256 x[8];
  for (int l = 0; l < 8; ++l) {
    x[l] = _mm256_add_ps(_mm256_add_ps(at(l), at(16 + l)), _mm256_add_ps(at(8 + l), at(24 + l)));
  }
  const __m256 h0 = _mm256_add_ps(x[0], x[4]), h1 = _mm256_add_ps(x[1], x[5]);
  const __m256 h2 = _mm256_add_ps(x[2], x[6]), h3 = _mm256_add_ps(x[3], x[7]);
  return _mm256_add_ps(_mm256_add_ps(h0, h1), _mm256_add_ps(h2, h3));
}
#endif

// ggml_vec_dot_f16 of q (already f16 values) and an f16 row.
inline float DotF16LikeGgml(const float* q, const uint16_t* k, int64_t n) {
  const int64_t full = n - n % 32;
  float lane[32] = {};
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  // The same lanes in registers (the ISA files are built with these extensions).
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t i = 0; i < full; i += 32) {
    for (int r = 0; r < 4; ++r) {
      const __m256 kv = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i + 8 * r)));
      acc[r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + i + 8 * r), acc[r]);
    }
  }
  if (full == n) return ReduceGgmlLanes(acc);
  for (int r = 0; r < 4; ++r) _mm256_storeu_ps(lane + 8 * r, acc[r]);
#else
  for (int64_t i = 0; i < full; i += 32) {
    for (int l = 0; l < 32; ++l) lane[l] = std::fma(HalfToFloat(k[i + l]), q[i + l], lane[l]);
  }
#endif
  double sum = full > 0 ? static_cast<double>(ReduceGgmlLanes(lane)) : 0.0;
  for (int64_t i = full; i < n; ++i) sum += static_cast<double>(HalfToFloat(k[i]) * q[i]);
  return static_cast<float>(sum);
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// ReduceGgmlLanes of 8 vectors x[0..8) (each already (a0 + a2) + (a1 + a3)) at once, in the
// same order: each vector's halves added, then its pairs twice; returns the 8 sums in order.
inline __m256 ReduceGgmlHalves8(const __m256 (&x)[8]) {
  __m256 h[4];  // h[i]: the 4-lane halves' sums of x[2i] (low 128 bits) and x[2i + 1]
  for (int i = 0; i < 4; ++i) {
    h[i] = _mm256_add_ps(_mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31));
  }
  const __m256 pairs01 = _mm256_hadd_ps(h[0], h[1]);     // x0 x0 x2 x2 | x1 x1 x3 x3
  const __m256 pairs23 = _mm256_hadd_ps(h[2], h[3]);     // x4 x4 x6 x6 | x5 x5 x7 x7
  const __m256 sums = _mm256_hadd_ps(pairs01, pairs23);  // x0 x2 x4 x6 | x1 x3 x5 x7
  return _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// AttendF16LikeGgml for G query heads of a GQA group (head size a multiple of 32), the same
// sums with fewer instructions: each K/V row converted from f16 once for the G heads, K·q
// eight positions at a time (one reduction for eight), and each of the 32 V lanes
// accumulated over its positions (j ≡ lane mod 32) in registers, 32 output elements at a
// time, where the generic loop loaded and stored every lane at each position.
// row_offsets[j]: KvRowOffset(a, j); lanes: G × 32 × head_dim floats of scratch.
template <int G>
void AttendF16HeadsLikeGgml(const AttendArgs& a, int first, const int64_t* row_offsets,
                            float* lanes) {
  const int64_t d = a.head_dim;
  const int32_t len = a.len;
  const auto* k = static_cast<const uint16_t*>(a.k);
  const auto* v = static_cast<const uint16_t*>(a.v);
  const float* q = a.q_group + first * d;
  float* scores = a.scores + static_cast<int64_t>(first) * len;
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int32_t j0 = 0; j0 < len; j0 += 8) {
    const int n = std::min<int32_t>(8, len - j0);
    __m256 x[G][8];
    for (int jj = 0; jj < 8; ++jj) {
      __m256 acc[G][4];
      for (int g = 0; g < G; ++g) {
        for (int r = 0; r < 4; ++r) acc[g][r] = _mm256_setzero_ps();
      }
      if (jj < n) {
        const uint16_t* row = k + row_offsets[j0 + jj];
        for (int64_t i = 0; i < d; i += 32) {
          __m256 kv[4];
          for (int r = 0; r < 4; ++r) kv[r] = LoadHalf8(row + i + 8 * r);
          for (int g = 0; g < G; ++g) {
            for (int r = 0; r < 4; ++r) {
              acc[g][r] =
                  _mm256_fmadd_ps(kv[r], _mm256_loadu_ps(q + g * d + i + 8 * r), acc[g][r]);
            }
          }
        }
      }
      for (int g = 0; g < G; ++g) {
        x[g][jj] = _mm256_add_ps(_mm256_add_ps(acc[g][0], acc[g][2]),
                                 _mm256_add_ps(acc[g][1], acc[g][3]));
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m256 dots = _mm256_mul_ps(ReduceGgmlHalves8(x[g]), scale);
      float* p = scores + static_cast<int64_t>(g) * len + j0;
      if (n == 8) {
        _mm256_storeu_ps(p, dots);
      } else {
        float tail[8];
        _mm256_storeu_ps(tail, dots);
        std::copy(tail, tail + n, p);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    float* p = scores + static_cast<int64_t>(g) * len;
    SoftmaxLikeGgml(std::span<float>(p, static_cast<size_t>(len)));
    // llama.cpp multiplies V by the probabilities rounded to f16.
    int32_t j = 0;
    for (; j + 8 <= len; j += 8) {
      const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(p + j), _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_ps(p + j, _mm256_cvtph_ps(half));
    }
    for (; j < len; ++j) p[j] = _cvtsh_ss(_cvtss_sh(p[j], _MM_FROUND_TO_NEAREST_INT));
  }
  for (int64_t c0 = 0; c0 < d; c0 += 32) {
    for (int l = 0; l < 32; ++l) {
      __m256 acc[G][4];
      for (int g = 0; g < G; ++g) {
        for (int c = 0; c < 4; ++c) acc[g][c] = _mm256_setzero_ps();
      }
      for (int32_t j = l; j < len; j += 32) {
        const uint16_t* row = v + row_offsets[j] + c0;
        __m256 vv[4];
        for (int c = 0; c < 4; ++c) vv[c] = LoadHalf8(row + 8 * c);
        for (int g = 0; g < G; ++g) {
          const __m256 pj = _mm256_broadcast_ss(scores + static_cast<int64_t>(g) * len + j);
          for (int c = 0; c < 4; ++c) acc[g][c] = _mm256_fmadd_ps(pj, vv[c], acc[g][c]);
        }
      }
      for (int g = 0; g < G; ++g) {
        for (int c = 0; c < 4; ++c) {
          _mm256_storeu_ps(lanes + (g * 32 + l) * d + c0 + 8 * c, acc[g][c]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    float* out = a.out_group + (first + g) * d;
    for (int64_t i = 0; i < d; i += 8) {
      _mm256_storeu_ps(out + i, ReduceGgmlLanes8(lanes + g * 32 * d + i, d));
    }
  }
}

// Row offsets of positions [0, len) block by block (no division per position).
inline void KvRowOffsets(const AttendArgs& a, int64_t* offsets) {
  const int64_t row = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  for (int32_t j0 = 0, b = 0; j0 < a.len; j0 += a.block_size, ++b) {
    const int64_t base = static_cast<int64_t>(a.blocks[b]) * a.block_size * row +
                         static_cast<int64_t>(a.kv_head) * a.head_dim;
    const int32_t n = std::min(a.block_size, a.len - j0);
    for (int32_t o = 0; o < n; ++o) offsets[j0 + o] = base + o * row;
  }
}

// The group's heads up to three at a time (registers); which heads share a pass does not
// change their sums.
inline void AttendF16LikeGgmlSimd(const AttendArgs& a) {
  // Scratch, every element written before it is read (no zeroing: 24 KB per unit at d = 64).
  const std::unique_ptr<int64_t[]> row_offsets(new int64_t[static_cast<size_t>(a.len)]);
  KvRowOffsets(a, row_offsets.get());
  const std::unique_ptr<float[]> lanes(new float[static_cast<size_t>(3 * 32 * a.head_dim)]);
  for (int first = 0; first < a.group;) {
    const int left = a.group - first;
    const int g = left == 4 ? 2 : std::min(left, 3);
    switch (g) {
      case 3: AttendF16HeadsLikeGgml<3>(a, first, row_offsets.get(), lanes.get()); break;
      case 2: AttendF16HeadsLikeGgml<2>(a, first, row_offsets.get(), lanes.get()); break;
      default: AttendF16HeadsLikeGgml<1>(a, first, row_offsets.get(), lanes.get()); break;
    }
    first += g;
  }
}
#endif

template <typename Ops>
void AttendF16LikeGgml(const AttendArgs& a) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  if (a.head_dim % 32 == 0) {
    AttendF16LikeGgmlSimd(a);
    return;
  }
#endif
  const int64_t d = a.head_dim;
  const int64_t len = a.len;
  const auto* k = static_cast<const uint16_t*>(a.k);
  const auto* v = static_cast<const uint16_t*>(a.v);
  auto offset = [&](int32_t pos) { return KvRowOffset(a, pos); };
  for (int32_t j = 0; j < a.len; ++j) {
    const int64_t off = offset(j);
    for (int g = 0; g < a.group; ++g) {
      a.scores[g * len + j] = DotF16LikeGgml(a.q_group + g * d, k + off, d) * a.scale;
    }
  }
  // lanes[l][i]: lane l of output element i's accumulators (positions j ≡ l mod 32).
  std::vector<float> lanes(static_cast<size_t>(32 * d));
  for (int g = 0; g < a.group; ++g) {
    float* p = a.scores + g * len;
    SoftmaxLikeGgml(std::span<float>(p, static_cast<size_t>(len)));
    std::fill(lanes.begin(), lanes.end(), 0.0f);
    for (int32_t j = 0; j < a.len; ++j) {
      // Fused p·v + lane in every ISA's Axpy (the scalar one rounds twice).
      Ops::AxpyF16(Ops::RoundToHalf(p[j]), v + offset(j), lanes.data() + (j % 32) * d, d);
    }
    float* out = a.out_group + g * d;
    float lane[32];
    int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    for (; i + 8 <= d; i += 8) _mm256_storeu_ps(out + i, ReduceGgmlLanes8(lanes.data() + i, d));
#endif
    for (; i < d; ++i) {
      for (int l = 0; l < 32; ++l) lane[l] = lanes[l * d + i];
      out[i] = ReduceGgmlLanes(lane);
    }
  }
}

template <typename Ops>
void AttendWith(const AttendArgs& a) {
  if (a.kv_type == KvType::kF16) {
    AttendF16LikeGgml<Ops>(a);
    return;
  }
  const int64_t d = a.head_dim;
  const int64_t len = a.len;
  const bool i8 = a.kv_type == KvType::kInt8;  // else f32 (f16 returned above)
  // Element offset of position pos's row; its scale (int8) is at offset / d.
  auto offset = [&](int32_t pos) { return KvRowOffset(a, pos); };
  for (int32_t j = 0; j < a.len; ++j) {
    const int64_t off = offset(j);
    for (int g = 0; g < a.group; ++g) {
      const float* qh = a.q_group + g * d;
      float dot;
      if (i8) {
        dot = Ops::DotI8(qh, static_cast<const int8_t*>(a.k) + off, d) * a.k_scale[off / d];
      } else {
        dot = Ops::DotF32(qh, static_cast<const float*>(a.k) + off, d);
      }
      a.scores[g * len + j] = dot * a.scale;
    }
  }
  std::fill(a.out_group, a.out_group + a.group * d, 0.0f);
  for (int g = 0; g < a.group; ++g) {
    std::span<float> p(a.scores + g * len, static_cast<size_t>(len));
    SoftmaxInPlace(p);
  }
  if (Ops::AccumulateV(a, offset)) return;
  for (int32_t j = 0; j < a.len; ++j) {
    const int64_t off = offset(j);
    for (int g = 0; g < a.group; ++g) {
      const float p = a.scores[g * len + j];
      float* out = a.out_group + g * d;
      if (i8) {
        Ops::AxpyI8(p * a.v_scale[off / d], static_cast<const int8_t*>(a.v) + off, out, d);
      } else {
        Ops::AxpyF32(p, static_cast<const float*>(a.v) + off, out, d);
      }
    }
  }
}

}  // namespace tokenmill::internal
