// What the MMVQ decode GEMVs (gemv.cu for the block-32 types, gemv_kquant.cu for the K-quants)
// share around their word loops: where a warp's tile of rows and tokens lies, how its sums
// leave the warp, and the launch of PlanMmvq's pass shape (mmvq_math.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmvq_math.h"

namespace tokenmill::cuda::internal {

// The warp's tile: kRows rows from r0, tokens [t0, t0 + n_t) of its pass.
struct MmvqTile {
  int lane;
  int64_t r0;
  int64_t t0;
  int n_t;
};
template <int kTokens, int kRows>
__device__ inline MmvqTile MmvqTileOf(int64_t n_tokens) {
  MmvqTile t;
  t.lane = threadIdx.x % kWarp;
  t.r0 = (static_cast<int64_t>(blockIdx.x) * kMmvqWarps + threadIdx.x / kWarp) * kRows;
  t.t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  t.n_t = n_tokens - t.t0 < kTokens ? static_cast<int>(n_tokens - t.t0) : kTokens;
  return t;
}

// Each (row, token) sum over the warp's lanes (WarpSum's fixed butterfly), written by lane 0.
template <int kRows, int kTokens>
__device__ inline void StoreWarpSums(float (&acc)[kRows][kTokens], const MmvqTile& t,
                                     int64_t rows, float* y) {
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    if (t.r0 + rr >= rows) break;
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      if (tt >= t.n_t) break;
      const float total = WarpSum(acc[rr][tt]);
      if (t.lane == 0) y[(t.t0 + tt) * rows + t.r0 + rr] = total;
    }
  }
}

// Launches PlanMmvq(rows, n_tokens)'s shape: launch(grid, threads, tokens, rows_per_warp), the
// last two as std::integral_constant so that each shape is a kernel instance of its own.
template <typename Launch>
cudaError_t LaunchMmvqPlan(int64_t rows, int64_t n_tokens, Launch launch) {
  const MmvqPlan p = PlanMmvq(rows, n_tokens);
  if (p.passes > 65535 || p.blocks_x > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(p.blocks_x), static_cast<unsigned>(p.passes));
  constexpr int kThreads = kMmvqWarps * kWarp;
  using std::integral_constant;
  switch (p.tokens_per_pass) {
    case 1: launch(grid, kThreads, integral_constant<int, 1>{}, integral_constant<int, 2>{}); break;
    case 2: launch(grid, kThreads, integral_constant<int, 2>{}, integral_constant<int, 2>{}); break;
    case 4: launch(grid, kThreads, integral_constant<int, 4>{}, integral_constant<int, 2>{}); break;
    default: launch(grid, kThreads, integral_constant<int, 8>{}, integral_constant<int, 1>{});
  }
  return LaunchStatus();
}

}  // namespace tokenmill::cuda::internal
