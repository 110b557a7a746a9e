// Row-wise ops of the forward pass (kernels/cpu/elementwise.h on the device).
#include <cuda_fp16.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmvq_math.h"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::GridStrideBlocks;
using internal::LaunchStatus;

constexpr int kRowThreads = 256;

__global__ void EmbeddingKernel(DeviceWeight table, const int32_t* ids, float* out) {
  const int64_t t = blockIdx.x;
  const uint8_t* row = table.data + static_cast<int64_t>(ids[t]) * table.row_bytes;
  for (int64_t c = threadIdx.x; c < table.cols; c += blockDim.x) {
    out[t * table.cols + c] = DeviceElement(table.type, row, table.cols, c);
  }
}

// Sum of squares in double over the block; every thread gets the total.
__device__ double BlockSumSquares(const float* x, int n) {
  __shared__ double partial[kRowThreads];
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<double>(x[i] * x[i]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kRowThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();  // partial is reused by the next call
  return total;
}

__device__ void NormalizeRow(const float* x, const float* weight, int n, float eps, float* out) {
  const float mean = static_cast<float>(BlockSumSquares(x, n) / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = __fmul_rn(__fmul_rn(x[i], scale), weight[i]);
}

__global__ void RmsNormKernel(const float* x, const float* weight, const int32_t* rows, int n,
                              float eps, float* out) {
  const int64_t r = blockIdx.x;
  const int64_t src = rows != nullptr ? rows[r] : r;
  NormalizeRow(x + src * n, weight, n, eps, out + r * n);
}

__global__ void AddRmsNormKernel(float* x, const float* y, const float* weight, int n, float eps,
                                 float* out) {
  float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  const float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] += yr[i];
  __syncthreads();  // each thread reads all of the row in the sum
  NormalizeRow(xr, weight, n, eps, out + static_cast<int64_t>(blockIdx.x) * n);
}

__global__ void AddKernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] += y[i];
  }
}

__global__ void AddBiasKernel(float* x, const float* bias, int64_t total, int n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] += bias[i % n];
  }
}

// One block per (token, head); threads over rotation pairs.
__global__ void RopeKernel(DeviceRope rope, const int32_t* positions, int n_heads, float* x) {
  const int64_t t = blockIdx.x;
  float* head = x + (t * n_heads + blockIdx.y) * rope.head_dim;
  for (int i = threadIdx.x; i < rope.n_rot / 2; i += blockDim.x) {
    const float factor = rope.factors != nullptr ? rope.factors[i] : 1.0f;
    const double theta = RopeYarnAngle(positions[t], rope.position_scale, rope.inv_freq[i],
                                       factor, i, rope.ext_factor, rope.corr_low,
                                       rope.corr_high);
    const float c = __fmul_rn(static_cast<float>(cos(theta)), rope.cos_sin_scale);
    const float s = __fmul_rn(static_cast<float>(sin(theta)), rope.cos_sin_scale);
    int i0, i1;
    RopePair(rope.neox, i, rope.n_rot, &i0, &i1);
    const float a = head[i0];
    const float b = head[i1];
    // Separate roundings, no FMA: the CPU's a * c - b * s.
    head[i0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    head[i1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
  }
}

__global__ void CopyStridedKernel(const float* in, int64_t in_a, int64_t in_b, float* out,
                                  int64_t out_a, int64_t out_b, int64_t n_b, int64_t width,
                                  int64_t total) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % width, ab = e / width, b = ab % n_b, a = ab / n_b;
    out[a * out_a + b * out_b + j] = in[a * in_a + b * in_b + j];
  }
}

__global__ void SwiGluKernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), up[i]);
  }
}

__global__ void GeluTanhGluKernel(const float* gate, const float* up, int64_t n,
                                  const float* table, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = gate[i];
    if (x <= -10.0f) {
      out[i] = 0.0f;
    } else if (x >= 10.0f) {
      out[i] = __fmul_rn(x, up[i]);
    } else {
      out[i] = __fmul_rn(table[__half_as_ushort(__float2half_rn(x))], up[i]);
    }
  }
}

__global__ void ScaleKernel(float* x, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = __fmul_rn(x[i], scale);
  }
}

__global__ void SoftcapKernel(float* x, int64_t n, float cap, float inverse) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = __fmul_rn(tanhf(__fmul_rn(x[i], inverse)), cap);
  }
}

__global__ void FloatToBf16Kernel(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FloatToBf16Bits(x[i]);
  }
}

__global__ void ArgmaxKernel(const float* logits, int n_vocab, int32_t* out) {
  __shared__ float best_value[kRowThreads];
  __shared__ int32_t best_index[kRowThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  float value = -INFINITY;
  int32_t index = -1;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    if (index < 0 || row[i] > value) {
      value = row[i];
      index = i;
    }
  }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (int stride = kRowThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const int other = threadIdx.x + stride;
      const bool other_wins =
          best_index[other] >= 0 &&
          (best_index[threadIdx.x] < 0 || best_value[other] > best_value[threadIdx.x] ||
           (best_value[other] == best_value[threadIdx.x] && best_index[other] < best_index[threadIdx.x]));
      if (other_wins) {
        best_value[threadIdx.x] = best_value[other];
        best_index[threadIdx.x] = best_index[other];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_index[0] < 0 ? 0 : best_index[0];
}

}  // namespace

cudaError_t Embedding(const DeviceWeight& table, const int32_t* ids, int64_t n_tokens, float* out,
                      cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  EmbeddingKernel<<<static_cast<unsigned>(n_tokens), kRowThreads, 0, stream>>>(table, ids, out);
  return LaunchStatus();
}

cudaError_t RmsNorm(const float* x, const float* weight, const int32_t* rows, int64_t n_rows, int n,
                    float eps, float* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, stream>>>(x, weight, rows, n, eps,
                                                                          out);
  return LaunchStatus();
}

cudaError_t AddRmsNorm(float* x, const float* y, const float* weight, int64_t n_rows, int n,
                       float eps, float* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  AddRmsNormKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, stream>>>(x, y, weight, n, eps,
                                                                             out);
  return LaunchStatus();
}

cudaError_t AddInPlace(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AddKernel<<<GridStrideBlocks(n, 256), 256, 0, stream>>>(x, y, n);
  return LaunchStatus();
}

cudaError_t AddBias(float* x, const float* bias, int64_t n_rows, int n, cudaStream_t stream) {
  const int64_t total = n_rows * n;
  if (total == 0) return cudaSuccess;
  AddBiasKernel<<<GridStrideBlocks(total, 256), 256, 0, stream>>>(x, bias, total, n);
  return LaunchStatus();
}

cudaError_t Rope(const DeviceRope& rope, const int32_t* positions, int64_t n_tokens, int n_heads,
                 float* x, cudaStream_t stream) {
  if (n_tokens == 0 || n_heads == 0 || rope.n_rot == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_heads));
  RopeKernel<<<grid, 64, 0, stream>>>(rope, positions, n_heads, x);
  return LaunchStatus();
}

cudaError_t CopyStrided(const float* in, int64_t in_a, int64_t in_b, float* out, int64_t out_a,
                        int64_t out_b, int64_t n_a, int64_t n_b, int64_t width,
                        cudaStream_t stream) {
  const int64_t total = n_a * n_b * width;
  if (total == 0) return cudaSuccess;
  CopyStridedKernel<<<internal::GridStrideBlocks(total, 256), 256, 0, stream>>>(
      in, in_a, in_b, out, out_a, out_b, n_b, width, total);
  return internal::LaunchStatus();
}

cudaError_t SwiGlu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SwiGluKernel<<<GridStrideBlocks(n, 256), 256, 0, stream>>>(gate, up, n, out);
  return LaunchStatus();
}

cudaError_t GeluTanhGlu(const float* gate, const float* up, int64_t n, const float* table,
                        float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GeluTanhGluKernel<<<GridStrideBlocks(n, 256), 256, 0, stream>>>(gate, up, n, table, out);
  return LaunchStatus();
}

cudaError_t ScaleInPlace(float* x, int64_t n, float scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<GridStrideBlocks(n, 256), 256, 0, stream>>>(x, n, scale);
  return LaunchStatus();
}

cudaError_t SoftcapInPlace(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SoftcapKernel<<<GridStrideBlocks(n, 256), 256, 0, stream>>>(x, n, cap, 1.0f / cap);
  return LaunchStatus();
}

cudaError_t FloatToBf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FloatToBf16Kernel<<<GridStrideBlocks(n, 256), 256, 0, stream>>>(x, n, out);
  return LaunchStatus();
}

cudaError_t ArgmaxRows(const float* logits, int64_t n_rows, int n_vocab, int32_t* out,
                       cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  ArgmaxKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, stream>>>(logits, n_vocab, out);
  return LaunchStatus();
}

}  // namespace tokenmill::cuda
