// LoRA on the GPU as Punica's BGMV (batched gather matrix-vector): each token's adapter slot
// picks its pair, so the tokens of different adapters share one launch (S-LoRA's batching).
// Shrink: mid[t][k] = Σ_c x[t][c] · A[k][c] for k below the pair's rank; expand:
// y[t][r] += scale · Σ_k mid[t][k] · Bᵀ[k][r]. The per-element math, written once for the
// device (lora.cu) and the host, so the CPU tests check it and the GPU tests check the kernels
// against it bit for bit. Plain C++ when not compiled by nvcc.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/kernel_math.h"

namespace tokenmill::cuda {

// One adapter's pair for one base matrix of `rows` outputs and `cols` inputs, in device
// memory: what a token of that adapter adds to the matrix's product.
struct DeviceLoraPair {
  const float* a = nullptr;             // rank rows of cols
  const float* b_transposed = nullptr;  // rank rows of rows
  int32_t rank = 0;                     // 0: this slot's adapter leaves the matrix as it is
  float scale = 0.0f;                   // alpha / rank
};

// The shrink's dot product runs on one warp: lane l sums the inputs c ≡ l (mod 32) in order,
// then the lanes add as a tree (lane i takes lane i + offset, offsets 16, 8, 4, 2, 1: a warp's
// shuffle-down). Products are fused with their sums (MulAdd) on both sides, so the device's
// result is the host's bit for bit.
constexpr int kLoraLanes = 32;

TM_HOST_DEVICE inline float LoraShrinkLane(const float* x, const float* a_row, int64_t cols,
                                           int lane) {
  float sum = 0.0f;
  for (int64_t c = lane; c < cols; c += kLoraLanes) sum = MulAdd(x[c], a_row[c], sum);
  return sum;
}

// One token's expand of output r, from its shrink `mid` (the pair's rank of them).
TM_HOST_DEVICE inline float LoraExpandValue(const float* mid, const DeviceLoraPair& pair,
                                            int64_t rows, int64_t r) {
  float sum = 0.0f;
  for (int32_t k = 0; k < pair.rank; ++k) {
    sum = MulAdd(mid[k], pair.b_transposed[k * rows + r], sum);
  }
  return MulRn(pair.scale, sum);
}

// The kernels' result for one token on the host, in their order: y (rows) += the pair's update
// of x (cols). The pair's pointers are host memory here.
inline void LoraUpdateOnHost(const float* x, const DeviceLoraPair& pair, int64_t cols,
                             int64_t rows, float* y) {
  std::vector<float> mid(static_cast<size_t>(pair.rank));
  for (int32_t k = 0; k < pair.rank; ++k) {
    float lanes[kLoraLanes];
    for (int lane = 0; lane < kLoraLanes; ++lane) {
      lanes[lane] = LoraShrinkLane(x, pair.a + k * cols, cols, lane);
    }
    for (int offset = kLoraLanes / 2; offset > 0; offset /= 2) {
      for (int lane = 0; lane < offset; ++lane) lanes[lane] += lanes[lane + offset];
    }
    mid[static_cast<size_t>(k)] = lanes[0];
  }
  for (int64_t r = 0; r < rows; ++r) y[r] += LoraExpandValue(mid.data(), pair, rows, r);
}

}  // namespace tokenmill::cuda
