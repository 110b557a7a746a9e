// LoRA updates of a base matrix's product (kernels/cuda/lora_math.h: Punica's BGMV).
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/lora_math.h"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::LaunchStatus;

constexpr int kExpandThreads = 256;

// One warp per (token, k): mid[t][k] of the token's pair, lanes reduced as LoraUpdateOnHost.
__global__ void LoraShrinkKernel(const float* x, int64_t cols, const int32_t* token_slots,
                                 const DeviceLoraPair* pairs, int max_rank, float* mid) {
  const int64_t t = blockIdx.x;
  const int k = static_cast<int>(blockIdx.y);
  const int32_t slot = token_slots[t];
  if (slot < 0) return;
  const DeviceLoraPair pair = pairs[slot];
  if (k >= pair.rank) return;
  float v = LoraShrinkLane(x + t * cols, pair.a + static_cast<int64_t>(k) * cols, cols,
                           static_cast<int>(threadIdx.x));
  for (int offset = kLoraLanes / 2; offset > 0; offset /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  if (threadIdx.x == 0) mid[t * max_rank + k] = v;
}

// One thread per (token, output): y[t][r] += the expand of mid[t].
__global__ void LoraExpandKernel(const float* mid, int64_t rows, const int32_t* token_slots,
                                 const DeviceLoraPair* pairs, int max_rank, float* y) {
  const int64_t t = blockIdx.x;
  const int64_t r = static_cast<int64_t>(blockIdx.y) * kExpandThreads + threadIdx.x;
  const int32_t slot = token_slots[t];
  if (slot < 0 || r >= rows) return;
  const DeviceLoraPair pair = pairs[slot];
  if (pair.rank == 0) return;
  y[t * rows + r] += LoraExpandValue(mid + t * max_rank, pair, rows, r);
}

}  // namespace

cudaError_t LoraShrink(const float* x, int64_t n_tokens, int64_t cols,
                       const int32_t* token_slots, const DeviceLoraPair* pairs, int max_rank,
                       float* mid, cudaStream_t stream) {
  if (n_tokens == 0 || max_rank == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(max_rank));
  LoraShrinkKernel<<<grid, kLoraLanes, 0, stream>>>(x, cols, token_slots, pairs, max_rank, mid);
  return LaunchStatus();
}

cudaError_t LoraExpand(const float* mid, int64_t n_tokens, int64_t rows,
                       const int32_t* token_slots, const DeviceLoraPair* pairs, int max_rank,
                       float* y, cudaStream_t stream) {
  if (n_tokens == 0 || max_rank == 0 || rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n_tokens),
                  static_cast<unsigned>(CeilDiv(rows, kExpandThreads)));
  LoraExpandKernel<<<grid, kExpandThreads, 0, stream>>>(mid, rows, token_slots, pairs, max_rank,
                                                        y);
  return LaunchStatus();
}

}  // namespace tokenmill::cuda
