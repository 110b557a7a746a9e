// Matrix-vector products over weights in their file type (Matmul of kernels/cpu/matmul.h):
// one warp per output row, each block serving kGemvTokens tokens so a weight row is read
// once per kGemvTokens tokens. Activations stay float (the CPU quantizes them to int8; this
// is closer to the reference). Every (token, row) sum has the same order whatever the batch.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::kWarp;
using internal::WarpSum;

template <bool kQuantized>
__global__ void __launch_bounds__(kGemvWarps * kWarp)
    GemvKernel(DeviceWeight w, const float* x, int64_t n_tokens, float* y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= w.rows) return;  // whole warps leave together
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kGemvTokens;
  const int n_t = n_tokens - t0 < kGemvTokens ? static_cast<int>(n_tokens - t0) : kGemvTokens;
  const uint8_t* row = w.data + r * w.row_bytes;
  float sum[kGemvTokens];
#pragma unroll
  for (int tt = 0; tt < kGemvTokens; ++tt) sum[tt] = 0.0f;

  if (kQuantized) {
    const int64_t n_blocks = w.cols / kQuantBlock;
    for (int64_t blk = lane; blk < n_blocks; blk += kWarp) {
      float wv[kQuantBlock];
      DequantBlock(w.type, row, blk, wv);
#pragma unroll
      for (int tt = 0; tt < kGemvTokens; ++tt) {
        if (tt >= n_t) break;
        const float4* xt =
            reinterpret_cast<const float4*>(x + (t0 + tt) * w.cols + blk * kQuantBlock);
        float s = sum[tt];
#pragma unroll
        for (int j = 0; j < kQuantBlock / 4; ++j) {
          const float4 xv = xt[j];
          s += wv[4 * j] * xv.x;
          s += wv[4 * j + 1] * xv.y;
          s += wv[4 * j + 2] * xv.z;
          s += wv[4 * j + 3] * xv.w;
        }
        sum[tt] = s;
      }
    }
  } else {
    for (int64_t c = lane; c < w.cols; c += kWarp) {
      const float wv = DequantElement(w.type, row, c);
#pragma unroll
      for (int tt = 0; tt < kGemvTokens; ++tt) {
        if (tt >= n_t) break;
        sum[tt] += wv * x[(t0 + tt) * w.cols + c];
      }
    }
  }
#pragma unroll
  for (int tt = 0; tt < kGemvTokens; ++tt) {
    if (tt >= n_t) break;
    const float total = WarpSum(sum[tt]);
    if (lane == 0) y[(t0 + tt) * w.rows + r] = total;
  }
}

__global__ void DequantizeToBf16Kernel(DeviceWeight w, uint16_t* out) {
  const int64_t total = w.rows * w.cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / w.cols;
    out[e] = FloatToBf16Bits(DequantElement(w.type, w.data + r * w.row_bytes, e % w.cols));
  }
}

}  // namespace

cudaError_t Gemv(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                 cudaStream_t stream) {
  if (n_tokens == 0 || w.rows == 0) return cudaSuccess;
  const bool quantized = IsQuantized(w.type);
  if (quantized && w.cols % kQuantBlock != 0) return cudaErrorInvalidValue;
  const GemvGrid g = GemvGeometry(w.rows, n_tokens);
  if (g.blocks_y > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(g.blocks_x), static_cast<unsigned>(g.blocks_y));
  if (quantized) {
    GemvKernel<true><<<grid, kGemvWarps * kWarp, 0, stream>>>(w, x, n_tokens, y);
  } else {
    GemvKernel<false><<<grid, kGemvWarps * kWarp, 0, stream>>>(w, x, n_tokens, y);
  }
  return internal::LaunchStatus();
}

cudaError_t DequantizeToBf16(const DeviceWeight& w, uint16_t* out, cudaStream_t stream) {
  const int64_t total = w.rows * w.cols;
  if (total == 0) return cudaSuccess;
  DequantizeToBf16Kernel<<<internal::GridStrideBlocks(total, 256), 256, 0, stream>>>(w, out);
  return internal::LaunchStatus();
}

}  // namespace tokenmill::cuda
