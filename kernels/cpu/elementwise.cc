#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

void ApplyRope(const RopeParams& p, std::span<const int32_t> positions, int n_heads, float* x) {
  TM_CHECK(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
  const int half = p.n_rot / 2;
  TM_CHECK(p.freq_factors.empty() || static_cast<int>(p.freq_factors.size()) == half);
  // As llama.cpp (ggml_rope_cache_init): the angle of pair i is position * base^(-2/n_rot),
  // multiplied i times in float, divided by the pair's frequency factor, then scaled.
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  for (size_t t = 0; t < positions.size(); ++t) {
    float theta_base = static_cast<float>(positions[t]);
    float* row = x + static_cast<int64_t>(t) * n_heads * p.head_dim;
    for (int i = 0; i < half; ++i, theta_base *= theta_scale) {
      const float factor = p.freq_factors.empty() ? 1.0f : p.freq_factors[static_cast<size_t>(i)];
      const float theta = p.position_scale * (theta_base / factor);
      const float c = std::cos(theta);
      const float s = std::sin(theta);
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

// Cloned for FMA CPUs (chosen at load time): GgmlVectorExpf's fmas are then instructions,
// not calls into libm's fmaf; the results are the same either way (both fused).
#define TM_FMA_CLONES __attribute__((target_clones("fma", "default")))

#if defined(__x86_64__)
namespace {

#define TM_AVX2_FMA __attribute__((target("avx2,fma")))

// GgmlVectorExpf on 8 lanes: the same operations, lane for lane.
TM_AVX2_FMA inline __m256 GgmlVectorExpf8(__m256 x) {
  const __m256 shift = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
  const __m256 n = _mm256_sub_ps(z, shift);
  // fma(-n, c, x) == fnmadd(n, c, x): negating n is exact.
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f800000)));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
                                      _mm256_set1_ps(0x1.573e2ep-5f)),
                      u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
                                      _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  const __m256 normal = _mm256_fmadd_ps(j, k, k);
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 outside = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  if (_mm256_testz_ps(outside, outside)) return normal;
  // 2^n outside the normal range, as the scalar function.
  const __m256i g = _mm256_and_si256(
      _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
      _mm256_set1_epi32(static_cast<int32_t>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 far = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 scaled = _mm256_blendv_ps(_mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1),
                                         _mm256_mul_ps(s1, s1), far);
  return _mm256_blendv_ps(normal, scaled, outside);
}

// SwiGlu's full vectors, 8 lanes at a time: g / (1 + e^(0 - g)) · u, as the scalar loop.
TM_AVX2_FMA void SwiGluVectorsAvx2(const float* g, const float* u, int64_t n, float* o) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = GgmlVectorExpf8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
}

// SoftmaxLikeGgml's exponentials over the full vectors of x, 8 lanes at a time, written back;
// returns their sum in its order (per vector: halves, then lanes 0+2 and 1+3, then those two).
TM_AVX2_FMA double SoftmaxExpVectorsAvx2(float* x, size_t n_full, float max) {
  const __m256 max_v = _mm256_set1_ps(max);
  double sum = 0.0;
  for (size_t i = 0; i < n_full; i += 8) {
    const __m256 e = GgmlVectorExpf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), max_v));
    _mm256_storeu_ps(x + i, e);
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps(e, 1));
    const __m128 pairs = _mm_add_ps(h, _mm_movehl_ps(h, h));  // h0 + h2, h1 + h3
    sum += static_cast<double>(_mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs))));
  }
  return sum;
}

#undef TM_AVX2_FMA

// Asked once: CpuSupports runs cpuid, which a virtual machine traps (~0.25% of a step).
bool HasAvx2() {
  static const bool kAvx2 = CpuSupports(CpuIsa::kAvx2);
  return kAvx2;
}

}  // namespace
#endif

TM_FMA_CLONES void SwiGlu(const float* gate, const float* up, int64_t n_rows, int64_t row_size, float* out) {
  const int64_t vectors_end = row_size - row_size % 8;
#if defined(__x86_64__)
  // The compiler leaves the loop below scalar (GgmlVectorExpf's branch); this is ~10x faster.
  if (HasAvx2()) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* g = gate + r * row_size;
      const float* u = up + r * row_size;
      float* o = out + r * row_size;
      SwiGluVectorsAvx2(g, u, vectors_end, o);
      for (int64_t i = vectors_end; i < row_size; ++i) {
        o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      }
    }
    return;
  }
#endif
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* g = gate + r * row_size;
    const float* u = up + r * row_size;
    float* o = out + r * row_size;
    for (int64_t i = 0; i < vectors_end; ++i) o[i] = g[i] / (1.0f + GgmlVectorExpf(0.0f - g[i])) * u[i];
    for (int64_t i = vectors_end; i < row_size; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
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

void SoftmaxInPlace(std::span<float> x) {
  if (x.empty()) return;
  const float max = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (float& v : x) {
    v = std::exp(v - max);
    sum += v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

}  // namespace tokenmill

namespace tokenmill {

TM_FMA_CLONES void SoftmaxLikeGgml(std::span<float> x) {
  if (x.empty()) return;
  const float max = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  size_t i = 0;
#if defined(__x86_64__)
  if (HasAvx2()) {
    i = x.size() - x.size() % 8;
    sum = SoftmaxExpVectorsAvx2(x.data(), i, max);
  }
#endif
  for (; i < x.size(); i += 8) {
    float e[8] = {};
    for (size_t l = 0; l < 8 && i + l < x.size(); ++l) x[i + l] = e[l] = GgmlVectorExpf(x[i + l] - max);
    // The high and low halves, then lanes (0+2, 1+3), then those two.
    const float h0 = e[0] + e[4], h1 = e[1] + e[5], h2 = e[2] + e[6], h3 = e[3] + e[7];
    sum += static_cast<double>((h0 + h2) + (h1 + h3));
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

}  // namespace tokenmill
