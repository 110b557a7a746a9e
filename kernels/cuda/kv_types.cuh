// How each KV element type is stored and read back (internal to kernels/cuda). A new KV type
// (int8, fp8) adds a specialization here and a case in the launchers' switches.
#pragma once

#include <cuda_fp16.h>

namespace tokenmill::cuda::internal {

template <typename T>
struct KvElement;

template <>
struct KvElement<__half> {
  __device__ static __half Store(float x) { return __float2half_rn(x); }
  __device__ static float Load(__half x) { return __half2float(x); }
  // Queries are rounded to the K type's precision before the dot product, as the CPU does
  // (its f16 dot products take f16 operands).
  __device__ static float RoundQuery(float x) { return __half2float(__float2half_rn(x)); }
};

template <>
struct KvElement<float> {
  __device__ static float Store(float x) { return x; }
  __device__ static float Load(float x) { return x; }
  __device__ static float RoundQuery(float x) { return x; }
};

}  // namespace tokenmill::cuda::internal
