// Row-wise ops of the llama-family forward pass, over rows of plain float arrays.
// Each computes a token's row from that row alone, in a fixed order. Those with vector
// versions (SwiGlu, SoftmaxLikeGgml) run the kernels of a CpuContext (kernel_table.h), which
// give the same values on every ISA.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

namespace tokenmill {

struct CpuContext;  // kernels/cpu/matmul.h

// out[t] = x[t] / sqrt(mean(x[t]²) + eps) * weight, for n_rows rows of weight.size().
void RmsNorm(const float* x, std::span<const float> weight, float eps, int64_t n_rows, float* out);
// out = (x - mean) / sqrt(variance + eps) * weight + bias per row of weight.size(), as llama.cpp's
// LLM_NORM: ggml_norm (the mean and the squares summed in double, then float), ggml_mul,
// ggml_add. out may be x.
void LayerNorm(const float* x, std::span<const float> weight, std::span<const float> bias,
               float eps, int64_t n_rows, float* out);

// How RoPE pairs the dimensions of a head: llama GGUFs rotate adjacent pairs (2i, 2i+1),
// NeoX-style models (qwen2) rotate (i, i + n_rot / 2).
enum class RopeStyle { kAdjacentPairs, kNeox };

struct RopeParams {
  RopeStyle style = RopeStyle::kAdjacentPairs;
  int head_dim = 0;
  int n_rot = 0;              // rotated dimensions (first n_rot of each head)
  float freq_base = 10000.0f;
  float position_scale = 1.0f;  // linear scaling: positions multiplied by this
  // Per-pair frequency divisors (Llama 3 "rope_freqs", LongRoPE's short or long factors),
  // n_rot / 2 of them, or empty.
  std::span<const float> freq_factors;
  // YaRN (ggml's rope_yarn): with ext_factor > 0 each pair's angle mixes the scaled and the
  // unscaled one by a ramp over the pairs [corr_low, corr_high] (YarnCorrectionDims), and
  // cos/sin get YaRN's magnitude factor 1 + 0.1 ln(1 / position_scale).
  float ext_factor = 0.0f;
  float corr_low = 0.0f;
  float corr_high = 0.0f;
  // Multiplies cos and sin (ggml's attn_factor: YaRN's and LongRoPE's attention scaling).
  float attn_factor = 1.0f;
};

// What ApplyRope multiplies cos and sin by: attn_factor, times YaRN's magnitude
// 1 + 0.1 ln(1 / position_scale) when ext_factor is set (as ggml's rope_yarn).
float RopeCosSinScale(const RopeParams& params);

// YaRN's correction range for rotated dimensions trained at original_context tokens, as
// ggml_rope_yarn_corr_dims computes it: the pairs whose wavelength turns between beta_fast and
// beta_slow times over that context.
std::array<float, 2> YarnCorrectionDims(int n_rot, int original_context, float freq_base,
                                        float beta_fast, float beta_slow);

// Rotates in place the n_heads heads of each token's row (row stride n_heads * head_dim)
// by that token's position.
void ApplyRope(const RopeParams& params, std::span<const int32_t> positions, int n_heads,
               float* x);

// e^x as ggml's CPU backend computes it in 8-float vectors (ggml_v_expf, AVX2: a degree-5
// polynomial after a 2^n range reduction, ~1.5 ulp), lane for lane: llama.cpp's softmax and
// SiLU use it for every full vector of a row, so matching llama.cpp needs the same function.
inline float GgmlVectorExpf(float x) {
  const float shift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shift);  // x / ln 2, rounded in the mantissa
  const float n = z - shift;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));  // x - n ln 2
  const uint32_t e = std::bit_cast<uint32_t>(z) << 23;
  const float k = std::bit_cast<float>(e + std::bit_cast<uint32_t>(1.0f));  // 2^n
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);  // e^b - 1
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);
  // 2^n outside the normal range: scale in two steps, or flush to 0 / infinity.
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = std::bit_cast<float>(g + 0x7f000000u);
  const float s2 = std::bit_cast<float>(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// out[i] = silu(gate[i]) * up[i] over rows of row_size, as llama.cpp computes it
// (ggml_vec_swiglu_f32): each full 8-float vector of a row with GgmlVectorExpf, the rest of
// the row with expf.
void SwiGlu(const CpuContext& ctx, const float* gate, const float* up, int64_t n_rows,
            int64_t row_size, float* out);
// The same over one row of n.
inline void SwiGlu(const CpuContext& ctx, const float* gate, const float* up, int64_t n,
                   float* out) {
  SwiGlu(ctx, gate, up, 1, n, out);
}

// gpt-oss's clamped SwiGLU over n elements, as ggml_swiglu_oai computes it: with
// x = min(gate[i], limit) and y = clamp(up[i], -limit, limit), out[i] = x / (1 + expf(-alpha x))
// · (y + 1) (gpt-oss: alpha 1.702, limit 7).
void SwiGluOai(const float* gate, const float* up, int64_t n, float alpha, float limit,
               float* out);

// out[i] = GELU-tanh(gate[i]) * up[i] over n elements, as llama.cpp's CPU backend computes
// it (ggml_vec_geglu_f32 with GGML_GELU_FP16): gate rounded to f16, its GELU-tanh
// 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))) in float rounded to f16 (a table of every f16),
// times up; gate <= -10 gives 0, gate >= 10 gate · up.
void GeluTanhGlu(const float* gate, const float* up, int64_t n, float* out);
// The same with the kernels of ctx (8 elements a time in the SIMD tables).
void GeluTanhGlu(const CpuContext& ctx, const float* gate, const float* up, int64_t n, float* out);
// GeluTanhGlu's table: GELU-tanh of f16 value h at [h], then one 0 (a 32-bit gather of the last
// entry stays inside).
const uint16_t* GeluHalfTable();
// out[i] = GELU-tanh(x[i]) alone, as ggml_gelu on the CPU (ggml_vec_gelu_f32): GeluTanhGlu's
// with no up.
void GeluTanh(const float* x, int64_t n, float* out);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, int64_t n);

// A low-rank update of n_tokens rows: y[t][j] += Σ_r coeffs[t * rank + r] · bt[r * n + j],
// added in order of r (LoRA's B·(A·x) with B transposed), in the vectors of ctx's ISA (the same
// values in every table).
void AddLowRank(const CpuContext& ctx, const float* coeffs, int64_t n_tokens, int64_t rank,
                const float* bt, int64_t n, float* const* y);
// The same with bt in f16 (half the bytes to read): each element widened to f32 exactly, so
// the sums equal those over bt widened first.
void AddLowRank(const CpuContext& ctx, const float* coeffs, int64_t n_tokens, int64_t rank,
                const uint16_t* bt, int64_t n, float* const* y);

// Adds bias (one row) to each of n_rows rows.
void AddBias(float* x, std::span<const float> bias, int64_t n_rows);

// Softmax of x in place; a sink (> -inf: attention sinks, AttentionVariant::sinks) joins it as
// one more element whose probability is dropped.
void SoftmaxInPlace(std::span<float> x, float sink = -INFINITY);

// Softmax of x in place as llama.cpp's soft_max computes a row (ggml_vec_soft_max_f32):
// GgmlVectorExpf for every element (llama.cpp's rows are padded to a multiple of 8 by masked
// positions, which add 0), each 8-float vector summed in float in SSE's pairwise order and
// added to a double, then every element scaled by float(1 / sum). A sink (> -inf) joins the
// max and adds expf(sink - max) to the sum, as ggml_soft_max_add_sinks.
void SoftmaxLikeGgml(const CpuContext& ctx, std::span<float> x, float sink = -INFINITY);

}  // namespace tokenmill
