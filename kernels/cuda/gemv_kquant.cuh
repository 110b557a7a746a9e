// The K-quant GEMV (gemv_kquant.cu), internal to kernels/cuda: GemvQ8_1 (ops.h) hands it the
// Q4_K / Q5_K / Q6_K weights, so callers see one quantized GEMV.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mmvq_launch.cuh"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda::internal {

// GemvQ8_1 for a packed K-quant weight (mmvq_kquant_math.h, cols a multiple of 256): each
// (t, r) equal to KMmvqDot bit for bit whatever the batch; `g` and grid_z as GemvQ8_1Rows.
cudaError_t GemvKQuantQ8_1(const DeviceWeight& w, const uint8_t* x_q8, int64_t n_tokens, float* y,
                           const MmvqRows& g, int64_t grid_z, cudaStream_t stream);

}  // namespace tokenmill::cuda::internal
