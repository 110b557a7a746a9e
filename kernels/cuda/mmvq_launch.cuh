// What the MMVQ decode GEMVs (gemv.cu for the block-32 types, gemv_kquant.cu for the K-quants)
// share around their word loops: where a warp's tile of rows and tokens lies, how its sums
// leave the warp, and the launch of PlanMmvq's pass shape (mmvq_math.h); the same for a step's
// (token, choice) pairs grouped by expert (GroupedGemvQ8_1 of ops.h), which only changes where a
// tile's weights and activation rows are.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmvq_math.h"

namespace tokenmill::cuda::internal {

// The rows of activations a launch multiplies. Dense (begin null): rows 0..n_tokens-1, output
// row t from activation row t. Grouped by expert (DeviceExpertGroups of ops.h): block z is
// expert z, whose slots begin[z]..begin[z + 1] it takes in passes (blockIdx.y) over the weight
// matrix `expert_bytes` after expert z - 1's; slot s writes output row s and reads activation
// row order[s] / n_used (order null: row s). The grid is sized for the largest group there can
// be (every token), so a block past its expert's slots does nothing.
struct MmvqRows {
  const int32_t* begin = nullptr;
  const int32_t* order = nullptr;
  int32_t n_used = 1;
  int64_t expert_bytes = 0;
};

// The activation row that output row (slot) s reads.
__device__ inline int64_t MmvqInputRow(const MmvqRows& g, int64_t s) {
  return g.order == nullptr ? s : g.order[s] / g.n_used;
}

// The warp's tile: kRows rows from r0 of the matrix at `data`, output rows [t0, t0 + n_t) of its
// pass (n_t <= 0: nothing to do, for the whole block).
struct MmvqTile {
  int lane;
  int64_t r0;
  int64_t t0;
  int n_t;
  const uint8_t* data;
};
template <int kTokens, int kRows>
__device__ inline MmvqTile MmvqTileOf(int64_t n_tokens, const uint8_t* data, const MmvqRows& g) {
  MmvqTile t;
  t.lane = threadIdx.x % kWarp;
  t.r0 = (static_cast<int64_t>(blockIdx.x) * kMmvqWarps + threadIdx.x / kWarp) * kRows;
  int64_t end = n_tokens;
  t.t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  t.data = data;
  if (g.begin != nullptr) {
    t.t0 += g.begin[blockIdx.z];
    end = g.begin[blockIdx.z + 1];
    t.data = data + static_cast<int64_t>(blockIdx.z) * g.expert_bytes;
  }
  t.n_t = end - t.t0 < kTokens ? static_cast<int>(end - t.t0) : kTokens;
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
// last two as std::integral_constant so that each shape is a kernel instance of its own;
// grid_z: experts (grouped launches), else 1.
template <typename Launch>
cudaError_t LaunchMmvqPlan(int64_t rows, int64_t n_tokens, Launch launch, int64_t grid_z = 1) {
  const MmvqPlan p = PlanMmvq(rows, n_tokens);
  if (p.passes > 65535 || p.blocks_x > 0x7fffffff || grid_z < 1 || grid_z > 65535) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(p.blocks_x), static_cast<unsigned>(p.passes),
                  static_cast<unsigned>(grid_z));
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
