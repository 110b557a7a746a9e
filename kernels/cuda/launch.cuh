// Small helpers shared by the .cu files (internal to kernels/cuda).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_math.h"

namespace tokenmill::cuda::internal {

constexpr int kWarp = 32;

// Sum over the warp with a fixed butterfly: every lane gets the same value.
__device__ inline float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Blocks for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned GridStrideBlocks(int64_t n, int threads) {
  const int64_t blocks = CeilDiv(n > 0 ? n : 1, threads);
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

// The launch's error, or cudaSuccess (also after an empty launch that was skipped).
inline cudaError_t LaunchStatus() { return cudaGetLastError(); }

}  // namespace tokenmill::cuda::internal
