// KV append through the slot mapping (StoreKv of kernels/cpu/paged_attention.h).
#include <cuda_fp16.h>

#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::kWarp;

template <typename T>
__global__ void StoreKvKernel(T* k_cache, T* v_cache, const int64_t* slot_mapping, int64_t row,
                              int64_t total, const float* k, const float* v) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / row;
    const int64_t dst = slot_mapping[t] * row + e % row;
    k_cache[dst] = internal::KvElement<T>::Store(k[e]);
    v_cache[dst] = internal::KvElement<T>::Store(v[e]);
  }
}

// QuantizeKvRow over a warp: the lanes' maxima combine in a butterfly (the max is
// order-free, so the scale and codes equal the serial ones bit for bit).
template <bool kFp8>
__device__ void QuantizeRowWarp(const float* x, int n, int lane, uint8_t* codes, float* scale) {
  float amax = 0.0f;
  for (int i = lane; i < n; i += kWarp) amax = AbsMaxStep(amax, x[i]);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    amax = AbsMaxStep(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  const float qmax = kFp8 ? kE4M3Max : kInt8KvMax;
  const float inv = KvRowInverseScale(amax, qmax);
  for (int i = lane; i < n; i += kWarp) {
    codes[i] = kFp8 ? QuantizeE4M3(x[i], inv) : static_cast<uint8_t>(QuantizeInt8(x[i], inv));
  }
  if (lane == 0) *scale = KvRowScale(amax, qmax);
}

// One warp per (token, KV head) row of K and of V.
template <bool kFp8>
__global__ void StoreQuantizedKvKernel(KvCacheView kv, const int64_t* slot_mapping,
                                       int64_t n_rows, const float* k, const float* v) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  const int d = kv.head_dim;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / kWarp; r < n_rows;
       r += n_warps) {
    const int64_t t = r / kv.n_kv_heads;
    const int64_t dst = slot_mapping[t] * kv.n_kv_heads + r % kv.n_kv_heads;
    QuantizeRowWarp<kFp8>(k + r * d, d, lane, static_cast<uint8_t*>(kv.k) + dst * d,
                          static_cast<float*>(kv.k_scale) + dst);
    QuantizeRowWarp<kFp8>(v + r * d, d, lane, static_cast<uint8_t*>(kv.v) + dst * d,
                          static_cast<float*>(kv.v_scale) + dst);
  }
}

template <typename T>
cudaError_t Launch(const KvCacheView& kv, const int64_t* slot_mapping, int64_t n_tokens,
                   const float* k, const float* v, cudaStream_t stream) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  const int64_t total = n_tokens * row;
  StoreKvKernel<T><<<internal::GridStrideBlocks(total, 256), 256, 0, stream>>>(
      static_cast<T*>(kv.k), static_cast<T*>(kv.v), slot_mapping, row, total, k, v);
  return internal::LaunchStatus();
}

template <bool kFp8>
cudaError_t LaunchQuantized(const KvCacheView& kv, const int64_t* slot_mapping,
                            int64_t n_tokens, const float* k, const float* v,
                            cudaStream_t stream) {
  if (kv.k_scale == nullptr || kv.v_scale == nullptr) return cudaErrorInvalidValue;
  constexpr int kThreads = 128;
  const int64_t n_rows = n_tokens * kv.n_kv_heads;
  StoreQuantizedKvKernel<kFp8>
      <<<internal::GridStrideBlocks(n_rows * kWarp, kThreads), kThreads, 0, stream>>>(
          kv, slot_mapping, n_rows, k, v);
  return internal::LaunchStatus();
}

}  // namespace

cudaError_t StoreKv(const KvCacheView& kv, const int64_t* slot_mapping, int64_t n_tokens,
                    const float* k, const float* v, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  switch (kv.type) {
    case KvType::kF16:
      return Launch<__half>(kv, slot_mapping, n_tokens, k, v, stream);
    case KvType::kF32:
      return Launch<float>(kv, slot_mapping, n_tokens, k, v, stream);
    case KvType::kInt8:
      return LaunchQuantized<false>(kv, slot_mapping, n_tokens, k, v, stream);
    case KvType::kFp8:
      return LaunchQuantized<true>(kv, slot_mapping, n_tokens, k, v, stream);
    case KvType::kQ4_0:
    case KvType::kInt4:
      return cudaErrorInvalidValue;  // the CPU only (CudaKvCache refuses it)
  }
  return cudaErrorInvalidValue;
}

}  // namespace tokenmill::cuda
