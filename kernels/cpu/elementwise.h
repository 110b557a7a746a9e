// Row-wise ops of the llama-family forward pass, over rows of plain float arrays.
// Each computes a token's row from that row alone, in a fixed order.
#pragma once

#include <cstdint>
#include <span>

namespace tokenmill {

// out[t] = x[t] / sqrt(mean(x[t]²) + eps) * weight, for n_rows rows of weight.size().
void RmsNorm(const float* x, std::span<const float> weight, float eps, int64_t n_rows, float* out);

// How RoPE pairs the dimensions of a head: llama GGUFs rotate adjacent pairs (2i, 2i+1),
// NeoX-style models (qwen2) rotate (i, i + n_rot / 2).
enum class RopeStyle { kAdjacentPairs, kNeox };

struct RopeParams {
  RopeStyle style = RopeStyle::kAdjacentPairs;
  int head_dim = 0;
  int n_rot = 0;              // rotated dimensions (first n_rot of each head)
  float freq_base = 10000.0f;
  float position_scale = 1.0f;  // linear scaling: positions multiplied by this
  // Per-pair frequency divisors (Llama 3 "rope_freqs"), n_rot / 2 of them, or empty.
  std::span<const float> freq_factors;
};

// Rotates in place the n_heads heads of each token's row (row stride n_heads * head_dim)
// by that token's position.
void ApplyRope(const RopeParams& params, std::span<const int32_t> positions, int n_heads,
               float* x);

// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, int64_t n);

// Adds bias (one row) to each of n_rows rows.
void AddBias(float* x, std::span<const float> bias, int64_t n_rows);

// Softmax of x in place.
void SoftmaxInPlace(std::span<float> x);

}  // namespace tokenmill
