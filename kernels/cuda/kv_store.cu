// KV append through the slot mapping (StoreKv of kernels/cpu/paged_attention.h).
#include <cuda_fp16.h>

#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

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

template <typename T>
cudaError_t Launch(const DeviceKvLayer& kv, const int64_t* slot_mapping, int64_t n_tokens,
                   const float* k, const float* v, cudaStream_t stream) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  const int64_t total = n_tokens * row;
  StoreKvKernel<T><<<internal::GridStrideBlocks(total, 256), 256, 0, stream>>>(
      static_cast<T*>(kv.k), static_cast<T*>(kv.v), slot_mapping, row, total, k, v);
  return internal::LaunchStatus();
}

}  // namespace

cudaError_t StoreKv(const DeviceKvLayer& kv, const int64_t* slot_mapping, int64_t n_tokens,
                    const float* k, const float* v, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  switch (kv.type) {
    case DeviceKvType::kF16:
      return Launch<__half>(kv, slot_mapping, n_tokens, k, v, stream);
    case DeviceKvType::kF32:
      return Launch<float>(kv, slot_mapping, n_tokens, k, v, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tokenmill::cuda
