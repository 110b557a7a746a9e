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
    if (v_cache != nullptr) v_cache[dst] = internal::KvElement<T>::Store(v[e]);
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

// One warp per (token, KV head) row of K and of V (K alone with V within K).
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
    if (kv.v_in_k) continue;
    QuantizeRowWarp<kFp8>(v + r * d, d, lane, static_cast<uint8_t*>(kv.v) + dst * d,
                          static_cast<float*>(kv.v_scale) + dst);
  }
}

// Registers of a row per lane (element lane + 32 i in register i): heads up to kMaxHeadDim.
constexpr int kRowRegs = kMaxHeadDim / kWarp;
static_assert(kKvQ4Block == kWarp && kKvInt4Group == kWarp, "a lane per element of a block");

// One (token, KV head) row of d values (a multiple of 32, <= kMaxHeadDim) as q4_0 or int4,
// over a warp: the row rotated where `rotation` > 0 (KvRotationOf), then block i, held in
// register i across the lanes, quantized as QuantizeKvBlockQ4_0 / QuantizeKvGroupInt4 do it
// serially (the picks reduced in a butterfly: their order is total, so the same elements).
template <bool kInt4>
__device__ void QuantizeFourBitRowWarp(const float* src, int d, int rotation, float norm,
                                       int lane, uint8_t* codes, uint16_t* scales) {
  float x[kRowRegs];
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) x[i] = lane + i * kWarp < d ? src[lane + i * kWarp] : 0.0f;
  if (rotation > 0) internal::HadamardRotateWarp(x, rotation, norm, lane);
  auto reduce = [](KvPick pick) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const KvPick other{__shfl_xor_sync(0xffffffffu, pick.key, offset),
                         __shfl_xor_sync(0xffffffffu, pick.index, offset)};
      pick = PickGreater(pick, other);
    }
    return pick;
  };
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    if (i * kWarp >= d) break;  // the same for every lane
    const float v = x[i];
    int code;
    if constexpr (kInt4) {
      const KvPick lo = reduce(Int4MinPick(v, lane)), hi = reduce(Int4MaxPick(v, lane));
      // Picks past the block (index + 32) only where element 0 is NaN, and unused then.
      const Int4Params p = Int4GroupBounds(__shfl_sync(0xffffffffu, v, 0),
                                           __shfl_sync(0xffffffffu, v, lo.index % kWarp),
                                           __shfl_sync(0xffffffffu, v, hi.index % kWarp));
      code = Int4Code(v, p);
      if (lane == 0) {
        scales[2 * i] = p.scale_bits;
        scales[2 * i + 1] = p.zero_bits;
      }
    } else {
      const KvPick pick = reduce(Q4_0Pick(v, lane));
      const Q4_0Params p =
          Q4_0BlockParams(Q4_0BlockMax(pick, __shfl_sync(0xffffffffu, v, pick.index)));
      code = Q4_0Code(v, p.inv);
      if (lane == 0) scales[i] = p.d_bits;
    }
    // Byte j of the block: element j's code low, element j + 16's high.
    const int high = __shfl_down_sync(0xffffffffu, code, kWarp / 2);
    if (lane < kWarp / 2) codes[i * (kWarp / 2) + lane] = PackNibbles(code, high);
  }
}

// One warp per (token, KV head) row of K and of V; K and V rotated by their own blocks.
template <bool kInt4>
__global__ void StoreFourBitKvKernel(KvCacheView kv, const int64_t* slot_mapping,
                                     int64_t n_rows, const float* k, const float* v,
                                     int k_rotation, float k_norm, int v_rotation,
                                     float v_norm) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  const int d = kv.head_dim;
  // A row's codes are d / 2 bytes and its scales d / 32 f16s (q4_0) or pairs (int4).
  const int scale_halves = (kInt4 ? 2 : 1) * d / kWarp;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / kWarp; r < n_rows;
       r += n_warps) {
    const int64_t t = r / kv.n_kv_heads;
    const int64_t dst = slot_mapping[t] * kv.n_kv_heads + r % kv.n_kv_heads;
    QuantizeFourBitRowWarp<kInt4>(k + r * d, d, k_rotation, k_norm, lane,
                                  static_cast<uint8_t*>(kv.k) + dst * (d / 2),
                                  static_cast<uint16_t*>(kv.k_scale) + dst * scale_halves);
    QuantizeFourBitRowWarp<kInt4>(v + r * d, d, v_rotation, v_norm, lane,
                                  static_cast<uint8_t*>(kv.v) + dst * (d / 2),
                                  static_cast<uint16_t*>(kv.v_scale) + dst * scale_halves);
  }
}

template <typename T>
cudaError_t Launch(const KvCacheView& kv, const int64_t* slot_mapping, int64_t n_tokens,
                   const float* k, const float* v, cudaStream_t stream) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  const int64_t total = n_tokens * row;
  StoreKvKernel<T><<<internal::GridStrideBlocks(total, 256), 256, 0, stream>>>(
      static_cast<T*>(kv.k), kv.v_in_k ? nullptr : static_cast<T*>(kv.v), slot_mapping, row,
      total, k, v);
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

template <bool kInt4>
cudaError_t LaunchFourBit(const KvCacheView& kv, const int64_t* slot_mapping, int64_t n_tokens,
                          const float* k, const float* v, cudaStream_t stream) {
  if (kv.k_scale == nullptr || kv.v_scale == nullptr || kv.head_dim % kKvQ4Block != 0 ||
      kv.head_dim > kMaxHeadDim || kv.v_in_k) {
    return cudaErrorInvalidValue;
  }
  const int k_rotation = KvKeyRotation(kv.head_dim), v_rotation = KvValueRotation(kv.head_dim);
  const float k_norm = k_rotation > 0 ? HadamardNorm(k_rotation) : 0.0f;
  const float v_norm = v_rotation > 0 ? HadamardNorm(v_rotation) : 0.0f;
  constexpr int kThreads = 128;
  const int64_t n_rows = n_tokens * kv.n_kv_heads;
  StoreFourBitKvKernel<kInt4>
      <<<internal::GridStrideBlocks(n_rows * kWarp, kThreads), kThreads, 0, stream>>>(
          kv, slot_mapping, n_rows, k, v, k_rotation, k_norm, v_rotation, v_norm);
  return internal::LaunchStatus();
}

}  // namespace

cudaError_t StoreKv(const KvCacheView& kv, const int64_t* slot_mapping, int64_t n_tokens,
                    const float* k, const float* v, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  if (kv.v_type != kv.type) return cudaErrorInvalidValue;  // K and V of one type on CUDA
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
      return LaunchFourBit<false>(kv, slot_mapping, n_tokens, k, v, stream);
    case KvType::kInt4:
      return LaunchFourBit<true>(kv, slot_mapping, n_tokens, k, v, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tokenmill::cuda
