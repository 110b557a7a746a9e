// How each KV element type is stored and read back (internal to kernels/cuda). A new KV type
// adds a specialization here and a case in the launchers' switches. Quantized types (int8,
// fp8) load their code's value; the kernels multiply by the row's scale in registers.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/kernel_math.h"

namespace tokenmill::cuda::internal {

// An FP8 E4M3 code (kernel_math.h's FloatToE4M3), a type of its own for the templates.
struct E4M3Code {
  uint8_t bits;
};

template <typename T>
struct KvElement;

template <>
struct KvElement<__half> {
  static constexpr bool kScaled = false;
  __device__ static __half Store(float x) { return __float2half_rn(x); }
  __device__ static float Load(__half x) { return __half2float(x); }
  // Queries are rounded to the K type's precision before the dot product, as the CPU does
  // (its f16 dot products take f16 operands).
  __device__ static float RoundQuery(float x) { return __half2float(__float2half_rn(x)); }
};

template <>
struct KvElement<float> {
  static constexpr bool kScaled = false;
  __device__ static float Store(float x) { return x; }
  __device__ static float Load(float x) { return x; }
  __device__ static float RoundQuery(float x) { return x; }
};

template <>
struct KvElement<int8_t> {
  static constexpr bool kScaled = true;
  static constexpr bool kFp8 = false;
  __device__ static float Load(int8_t x) { return static_cast<float>(x); }
  __device__ static float RoundQuery(float x) { return x; }
};

template <>
struct KvElement<E4M3Code> {
  static constexpr bool kScaled = true;
  static constexpr bool kFp8 = true;
  __device__ static float Load(E4M3Code x) { return E4M3ToFloat(x.bits); }
  __device__ static float RoundQuery(float x) { return x; }
};

}  // namespace tokenmill::cuda::internal
