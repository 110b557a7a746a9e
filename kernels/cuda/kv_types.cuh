// How each KV element type is stored and read back (internal to kernels/cuda). A new KV type
// adds a specialization here and a case in the launchers' switches. Quantized types (int8,
// fp8) load their code's value; the kernels multiply by the row's scale in registers. The
// 4-bit types (q4_0, int4) hold two codes a byte and f16 scales per block of 32: an element
// is dequantized whole (Load4); their K and queries are rotated (HadamardRotateWarp).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/launch.cuh"

namespace tokenmill::cuda::internal {

// An FP8 E4M3 code (kernel_math.h's FloatToE4M3), a type of its own for the templates.
struct E4M3Code {
  uint8_t bits;
};

// A byte of two 4-bit codes (kernel_math.h's layout), one type per 4-bit KV type.
struct Q4_0Codes {
  uint8_t bits;
};
struct Int4Codes {
  uint8_t bits;
};

// kScaled: one float scale per row (int8, fp8); kFourBit: codes two a byte with kScaleHalves
// f16s per block of 32 (q4_0's d; int4's scale and zero).
template <typename T>
struct KvElement;

template <>
struct KvElement<__half> {
  static constexpr bool kScaled = false;
  static constexpr bool kFourBit = false;
  __device__ static __half Store(float x) { return __float2half_rn(x); }
  __device__ static float Load(__half x) { return __half2float(x); }
  // Queries are rounded to the K type's precision before the dot product, as the CPU does
  // (its f16 dot products take f16 operands).
  __device__ static float RoundQuery(float x) { return __half2float(__float2half_rn(x)); }
};

template <>
struct KvElement<float> {
  static constexpr bool kScaled = false;
  static constexpr bool kFourBit = false;
  __device__ static float Store(float x) { return x; }
  __device__ static float Load(float x) { return x; }
  __device__ static float RoundQuery(float x) { return x; }
};

template <>
struct KvElement<int8_t> {
  static constexpr bool kScaled = true;
  static constexpr bool kFourBit = false;
  static constexpr bool kFp8 = false;
  __device__ static float Load(int8_t x) { return static_cast<float>(x); }
  __device__ static float RoundQuery(float x) { return x; }
};

template <>
struct KvElement<E4M3Code> {
  static constexpr bool kScaled = true;
  static constexpr bool kFourBit = false;
  static constexpr bool kFp8 = true;
  __device__ static float Load(E4M3Code x) { return E4M3ToFloat(x.bits); }
  __device__ static float RoundQuery(float x) { return x; }
};

template <>
struct KvElement<Q4_0Codes> {
  static constexpr bool kScaled = false;
  static constexpr bool kFourBit = true;
  static constexpr int kScaleHalves = 1;
  // Element j of a block: its 16 bytes of codes and its f16 scale(s).
  __device__ static float Load4(const uint8_t* block, int j, const uint16_t* scales) {
    return DequantQ4_0(block, j, HalfBitsToFloat(scales[0]));
  }
  __device__ static float RoundQuery(float x) { return x; }
};

template <>
struct KvElement<Int4Codes> {
  static constexpr bool kScaled = false;
  static constexpr bool kFourBit = true;
  static constexpr int kScaleHalves = 2;
  __device__ static float Load4(const uint8_t* block, int j, const uint16_t* scales) {
    return DequantQ4_1(block, j, HalfBitsToFloat(scales[0]), HalfBitsToFloat(scales[1]));
  }
  __device__ static float RoundQuery(float x) { return x; }
};

// Each block of n (64 <= n <= 32 kRegs, a power of two) elements of a row held by a warp, as
// element lane + 32 i in x[i], becomes H_n times it over sqrt(n) (norm = HadamardNorm(n)):
// the CPU's HadamardRotate bit for bit (HadamardButterfly). Every lane of the warp calls it.
template <int kRegs>
__device__ inline void HadamardRotateWarp(float (&x)[kRegs], int n, float norm, int lane) {
#pragma unroll
  for (int h = 1; h < kWarp; h *= 2) {  // n >= 64: every stride across lanes
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const float other = __shfl_xor_sync(0xffffffffu, x[i], h);
      x[i] = HadamardButterfly(x[i], other, (lane & h) != 0);
    }
  }
#pragma unroll
  for (int m = 1; m < kRegs; m *= 2) {  // strides of 32 m elements: registers i and i + m
    if (kWarp * m < n) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) {
        if ((i & m) == 0) {
          const float a = x[i], b = x[i | m];
          x[i] = HadamardButterfly(a, b, false);
          x[i | m] = HadamardButterfly(b, a, true);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRegs; ++i) x[i] = MulRn(x[i], norm);
}

}  // namespace tokenmill::cuda::internal
