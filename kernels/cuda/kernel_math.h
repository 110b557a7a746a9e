// Per-element math of the CUDA kernels, written once for the device and the host so the CPU
// unit tests (tests/kernels/cuda/kernel_math_test.cc) check it against the CPU kernels:
// weight dequantization, KV quantization (int8, FP8 E4M3, q4_0, int4) and the 4-bit types'
// rotation, RoPE angles, the online-softmax merge of flash-decoding, the split-K partition of
// attention, its shared-memory tiles and launch geometry. Plain C++ when not compiled by nvcc.
#pragma once

#include <cstdint>

#include <cmath>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define TM_HOST_DEVICE __host__ __device__
#else
#include "kernels/half.h"
#define TM_HOST_DEVICE
#endif

namespace tokenmill::cuda {

// ---- numbers -------------------------------------------------------------------------------

TM_HOST_DEVICE inline float BitsToFloat(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

TM_HOST_DEVICE inline float HalfBitsToFloat(uint16_t bits) {
#ifdef __CUDACC__
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
#else
  return HalfToFloat(bits);
#endif
}

TM_HOST_DEVICE inline float Bf16BitsToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

// float -> bfloat16 bits, round to nearest even, a NaN kept a (quiet) NaN: as
// __float2bfloat16_rn and the gguf package's BF16 quantization. f32's range, so activations
// past f16's 65504 stay finite.
TM_HOST_DEVICE inline uint16_t FloatToBf16Bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Little-endian u16 at any byte address (GGUF blocks of 18 or 34 bytes are only 2-aligned).
TM_HOST_DEVICE inline uint16_t LoadU16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// ---- weights: GGUF block layouts (kernels/dequantize.cc is the reference) ------------------

// Type ids as TensorType numbers them (GGUF's ggml_type); kept as ints so device code needs
// no host headers.
enum WeightTypeId : uint32_t {
  kWF32 = 0,
  kWF16 = 1,
  kWQ4_0 = 2,
  kWQ4_1 = 3,
  kWQ5_0 = 6,
  kWQ5_1 = 7,
  kWQ8_0 = 8,
  kWIQ4_NL = 20,
  kWBF16 = 30
};

constexpr int kQuantBlock = 32;  // elements per block of the quantized types below

TM_HOST_DEVICE constexpr bool IsQuantized(uint32_t type) {
  return type == kWQ4_0 || type == kWQ4_1 || type == kWQ8_0 || type == kWQ5_0 ||
         type == kWQ5_1 || type == kWIQ4_NL;
}
// Q4_1 and Q5_1 carry a minimum (x = d q + m); Q5_0 and Q5_1 a fifth bit per quant.
TM_HOST_DEVICE constexpr bool HasMin(uint32_t type) { return type == kWQ4_1 || type == kWQ5_1; }
TM_HOST_DEVICE constexpr bool HasFifthBits(uint32_t type) {
  return type == kWQ5_0 || type == kWQ5_1;
}

// Bytes of one Q block, or of one element for the float types.
TM_HOST_DEVICE constexpr int UnitBytes(uint32_t type) {
  switch (type) {
    case kWQ4_0: case kWIQ4_NL: return 18;
    case kWQ4_1: return 20;
    case kWQ5_0: return 22;
    case kWQ5_1: return 24;
    case kWQ8_0: return 34;
    case kWF32: return 4;
    default: return 2;
  }
}

// IQ4_NL's 16 non-linear levels (kIq4NlLevels of kernels/dequantize.h), four int8 to a word:
// scalar constants, so device code holds them in registers (the GEMV's byte permutes).
TM_HOST_DEVICE constexpr uint32_t PackLevels(int a, int b, int c, int d) {
  return static_cast<uint32_t>(static_cast<uint8_t>(a)) |
         static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24;
}
constexpr uint32_t kIq4NlLevels0 = PackLevels(-127, -104, -83, -65);
constexpr uint32_t kIq4NlLevels1 = PackLevels(-49, -35, -22, -10);
constexpr uint32_t kIq4NlLevels2 = PackLevels(1, 13, 25, 38);
constexpr uint32_t kIq4NlLevels3 = PackLevels(53, 69, 89, 113);
TM_HOST_DEVICE constexpr int Iq4NlLevel(int nibble) {
  const uint32_t word = nibble < 4    ? kIq4NlLevels0
                        : nibble < 8  ? kIq4NlLevels1
                        : nibble < 12 ? kIq4NlLevels2
                                      : kIq4NlLevels3;
  return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * (nibble & 3))));
}

// Element j (< 32) of a block: low nibbles are elements 0..15, high nibbles 16..31 (the
// fifth bit of Q5_x element j is bit j of its qh). d and m already as float (decoded once per
// block). d q is exact (an f16 times at most 8 bits), so d q + m rounds once however it is
// contracted.
TM_HOST_DEVICE inline int Nibble(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
}
TM_HOST_DEVICE inline float DequantQ4_0(const uint8_t* qs, int j, float d) {
  return d * static_cast<float>(Nibble(qs, j) - 8);
}
TM_HOST_DEVICE inline float DequantQ4_1(const uint8_t* qs, int j, float d, float m) {
  return d * static_cast<float>(Nibble(qs, j)) + m;
}
TM_HOST_DEVICE inline float DequantQ8_0(const uint8_t* qs, int j, float d) {
  return d * static_cast<float>(static_cast<int8_t>(qs[j]));
}
TM_HOST_DEVICE inline float DequantIq4Nl(const uint8_t* qs, int j, float d) {
  return d * static_cast<float>(Iq4NlLevel(Nibble(qs, j)));
}
// Q5_0 (signed: q - 16) or Q5_1 (q + m); q = nibble | fifth << 4.
TM_HOST_DEVICE inline float DequantQ5(uint32_t type, const uint8_t* qs, int fifth, int j, float d,
                                      float m) {
  const int q = Nibble(qs, j) | fifth << 4;
  return type == kWQ5_0 ? d * static_cast<float>(q - 16) : d * static_cast<float>(q) + m;
}

// Element j of the GGUF block at b (of a quantized type): d, then m (HasMin), then qh
// (HasFifthBits), then the quants.
TM_HOST_DEVICE inline float DequantBlockElement(uint32_t type, const uint8_t* b, int j) {
  const float d = HalfBitsToFloat(LoadU16(b));
  switch (type) {
    case kWQ4_0: return DequantQ4_0(b + 2, j, d);
    case kWQ4_1: return DequantQ4_1(b + 4, j, d, HalfBitsToFloat(LoadU16(b + 2)));
    case kWIQ4_NL: return DequantIq4Nl(b + 2, j, d);
    case kWQ5_0: return DequantQ5(type, b + 6, (b[2 + j / 8] >> (j % 8)) & 1, j, d, 0.0f);
    case kWQ5_1:
      return DequantQ5(type, b + 8, (b[4 + j / 8] >> (j % 8)) & 1, j, d,
                       HalfBitsToFloat(LoadU16(b + 2)));
    default: return DequantQ8_0(b + 2, j, d);
  }
}

// The 32 elements of quantized block `block` of a row.
TM_HOST_DEVICE inline void DequantBlock(uint32_t type, const uint8_t* row, int64_t block,
                                        float* out) {
  const uint8_t* b = row + block * UnitBytes(type);
  for (int j = 0; j < kQuantBlock; ++j) out[j] = DequantBlockElement(type, b, j);
}

// Element i of a row of any supported type (slow for Q types: decodes the block's scale).
TM_HOST_DEVICE inline float DequantElement(uint32_t type, const uint8_t* row, int64_t i) {
  switch (type) {
    case kWF32: {
      const uint8_t* p = row + 4 * i;
      return BitsToFloat(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
    }
    case kWF16:
      return HalfBitsToFloat(LoadU16(row + 2 * i));
    case kWBF16:
      return Bf16BitsToFloat(LoadU16(row + 2 * i));
    default:
      return DequantBlockElement(type, row + (i / kQuantBlock) * UnitBytes(type),
                                 static_cast<int>(i % kQuantBlock));
  }
}

// ---- KV cache quantization: int8 and FP8 E4M3, a float scale per (token, KV head) row ------

// Round to nearest, ties to even (the CPU's std::nearbyint in the default rounding mode).
TM_HOST_DEVICE inline float RoundHalfEven(float x) {
#ifdef __CUDA_ARCH__
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

// max(m, |x|), NaN as soon as either is NaN: a row holding a NaN gets a NaN scale, so it
// reads back as NaN instead of as plausible numbers. The order of the steps never matters.
TM_HOST_DEVICE inline float AbsMaxStep(float m, float x) {
  const float a = x < 0.0f ? -x : x;
  if (a != a || m != m) return NAN;
  return a > m ? a : m;
}

// The largest |q| of each quantized type.
constexpr float kInt8KvMax = 127.0f;
constexpr float kE4M3Max = 448.0f;

// A row of amax = max|x| gets scale = amax / qmax (x ≈ q · scale) and is quantized as
// x · (qmax / amax); a zero row gets scale 0 and all-zero codes. Both as the CPU's
// QuantizeKvRowInt8 computes them for int8.
TM_HOST_DEVICE inline float KvRowScale(float amax, float qmax) { return amax / qmax; }
TM_HOST_DEVICE inline float KvRowInverseScale(float amax, float qmax) {
  return amax > 0.0f ? qmax / amax : (amax == 0.0f ? 0.0f : NAN);
}

// int8 code of x · inv_scale: rounded half to even, clamped to [-127, 127]; NaN (only in a
// row whose scale is NaN) gives 0.
TM_HOST_DEVICE inline int8_t QuantizeInt8(float x, float inv_scale) {
  const float r = RoundHalfEven(x * inv_scale);
  if (r != r) return 0;
  return static_cast<int8_t>(r < -kInt8KvMax ? -kInt8KvMax : r > kInt8KvMax ? kInt8KvMax : r);
}
TM_HOST_DEVICE inline float DequantizeInt8(int8_t q, float scale) {
  return static_cast<float>(q) * scale;
}

// FP8 E4M3 ("e4m3fn" of the OCP spec, NVIDIA's __nv_fp8_e4m3): 1 sign, 4 exponent bits
// (bias 7), 3 mantissa bits; subnormals m · 2^-9; S.1111.111 is NaN; no infinities; the
// largest finite value is 448. Encoding rounds to nearest even and saturates (as
// __NV_SATFINITE does): finite values and infinities beyond 448 become ±448, NaN stays NaN.
TM_HOST_DEVICE inline uint8_t FloatToE4M3(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);  // NaN
  float a;
  memcpy(&a, &abs_bits, sizeof a);
  if (a >= kE4M3Max) return static_cast<uint8_t>(sign | 0x7e);  // saturate (also inf)
  if (a < 0.015625f) {
    // Subnormal range (below 2^-6): m · 2^-9, m = 8 is the smallest normal (bits 0x08).
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(RoundHalfEven(a * 512.0f)));
  }
  // Normal: round the 23-bit mantissa to 3 bits, half to even; a carry bumps the exponent.
  const int exponent = static_cast<int>(abs_bits >> 23) - 127 + 7;  // 1..15
  const uint32_t mantissa = (abs_bits >> 20) & 0x7u;
  const uint32_t rest = abs_bits & 0xfffffu;
  uint32_t code = (static_cast<uint32_t>(exponent) << 3) | mantissa;
  if (rest > 0x80000u || (rest == 0x80000u && (mantissa & 1u))) ++code;  // carries into exponent
  return static_cast<uint8_t>(sign | code);  // a < 448 rounds to at most 448 (0x7e)
}

TM_HOST_DEVICE inline float E4M3ToFloat(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t exponent = (code >> 3) & 0xf;
  const uint32_t mantissa = code & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return BitsToFloat(sign | 0x7fc00000u);  // NaN
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 0.001953125f;  // m · 2^-9, exact
    return sign ? -value : value;
  }
  return BitsToFloat(sign | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

TM_HOST_DEVICE inline uint8_t QuantizeE4M3(float x, float inv_scale) {
  return FloatToE4M3(x * inv_scale);
}
TM_HOST_DEVICE inline float DequantizeE4M3(uint8_t q, float scale) {
  return E4M3ToFloat(q) * scale;
}

// One (token, KV head) row of n values into codes (int8 as its two's-complement byte, or
// E4M3); returns its scale. Serial, for the host; the device's StoreKv takes the same steps
// over a warp (the max is order-free, so the results are identical).
TM_HOST_DEVICE inline float QuantizeKvRow(const float* x, int n, bool fp8, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = AbsMaxStep(amax, x[i]);
  const float qmax = fp8 ? kE4M3Max : kInt8KvMax;
  const float inv = KvRowInverseScale(amax, qmax);
  for (int i = 0; i < n; ++i) {
    codes[i] = fp8 ? QuantizeE4M3(x[i], inv) : static_cast<uint8_t>(QuantizeInt8(x[i], inv));
  }
  return KvRowScale(amax, qmax);
}

// ---- KV cache quantization: 4-bit (q4_0 and int4), per block of 32 -------------------------
//
// The CPU's QuantizeKvRowQ4_0 and QuantizeKvRowInt4 (kernels/cpu/paged_attention.cc) bit for
// bit, in the pieces the device's StoreKv runs over a warp (lane j: element j of a block): a
// reduction that picks the block's extreme element, then each element's code from the
// block's parameters. Rows of values that are not NaN give identical bytes; a NaN's f16 may
// differ in its payload (the device's __float2half_rn has one NaN). Reading back, element j of
// a block (Nibble's layout) is DequantQ4_0 for q4_0 ((code - 8) · d) and DequantQ4_1 for int4
// (code · scale + zero): exact products, one rounding, the values the CPU's attention reads.

// The arithmetic the CPU code compiles to (its x86-64 baseline has no FMA), rounded one
// operation at a time on the device too, where nvcc would otherwise fuse a * b + c.
TM_HOST_DEVICE inline float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TM_HOST_DEVICE inline float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TM_HOST_DEVICE inline float SubRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
TM_HOST_DEVICE inline float DivRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// float -> f16 bits, round to nearest even (kernels/half.h's FloatToHalf on the host).
TM_HOST_DEVICE inline uint16_t FloatToHalfBits(float x) {
#ifdef __CUDACC__
  const __half_raw raw = __float2half_rn(x);
  return raw.x;
#else
  return FloatToHalf(x);
#endif
}

// A candidate of a block's reduction: a key (never NaN) and its element's index. Merged by
// key, ties to the lower index: a total order, so a serial scan and a warp's butterfly pick
// the same element, the first of the extreme ones, as the CPU's loops do (they replace their
// pick only on a strictly greater value).
struct KvPick {
  float key;
  int index;
};
TM_HOST_DEVICE inline KvPick PickGreater(KvPick a, KvPick b) {
  return b.key > a.key || (b.key == a.key && b.index < a.index) ? b : a;
}

// q4_0's candidate: |x|, a NaN never picked (the CPU's amax < |x| is false for it).
TM_HOST_DEVICE inline KvPick Q4_0Pick(float x, int index) {
  const float a = x < 0.0f ? -x : x;
  return KvPick{a == a ? a : -1.0f, index};
}
// The block's value of largest magnitude from its pick (`value`: the picked element), +0 for
// a block of zeros, as the CPU's max starts.
TM_HOST_DEVICE inline float Q4_0BlockMax(KvPick pick, float value) {
  return pick.key > 0.0f ? value : 0.0f;
}

// q4_0's d = max / -8, stored as f16, and 1/d of the unrounded d (0 for a zero block).
struct Q4_0Params {
  uint16_t d_bits;
  float inv;
};
TM_HOST_DEVICE inline Q4_0Params Q4_0BlockParams(float max) {
  const float d = max / -8.0f;  // exact but for subnormals, as on the CPU
  return Q4_0Params{FloatToHalfBits(d), d != 0.0f ? DivRn(1.0f, d) : 0.0f};
}
// trunc(min(15, x / d + 8.5)): a NaN gives 15 (the CPU's std::min(15.0f, NaN)). Below 0 only
// when 1/d overflowed (values under 2^-125): 0, the low nibble of x86's cast of -inf there.
TM_HOST_DEVICE inline int Q4_0Code(float x, float inv) {
  const float s = AddRn(MulRn(x, inv), 8.5f);
  const float c = s < 15.0f ? s : 15.0f;
  return c > 0.0f ? static_cast<int>(c) : 0;
}

// int4's candidates for the group's minimum and maximum. A NaN is never picked (key -inf,
// after every real element of that key); only a NaN first element makes the CPU's min and
// max NaN (they start from it): Int4GroupBounds.
TM_HOST_DEVICE inline KvPick Int4MinPick(float x, int index) {
  return x == x ? KvPick{-x, index} : KvPick{-INFINITY, index + kQuantBlock};
}
TM_HOST_DEVICE inline KvPick Int4MaxPick(float x, int index) {
  return x == x ? KvPick{x, index} : KvPick{-INFINITY, index + kQuantBlock};
}

// int4's scale = (max - min) / 15 and zero = min, each rounded to f16, and the codes'
// arithmetic over the rounded ones.
struct Int4Params {
  uint16_t scale_bits;
  uint16_t zero_bits;
  float zero;
  float inv;  // 1 / scale, 0 for a constant group
};
TM_HOST_DEVICE inline Int4Params Int4GroupParams(float lo, float hi) {
  Int4Params p;
  p.scale_bits = FloatToHalfBits(DivRn(SubRn(hi, lo), 15.0f));
  p.zero_bits = FloatToHalfBits(lo);
  const float scale = HalfBitsToFloat(p.scale_bits);
  p.zero = HalfBitsToFloat(p.zero_bits);
  p.inv = scale > 0.0f ? DivRn(1.0f, scale) : 0.0f;
  return p;
}
// min(15, max(0, round((x - zero) / scale))), clamped in float as the CPU: a NaN gives 0.
TM_HOST_DEVICE inline int Int4Code(float x, const Int4Params& p) {
  const float r = RoundHalfEven(MulRn(SubRn(x, p.zero), p.inv));
  const float c = 0.0f < r ? r : 0.0f;
  return static_cast<int>(c < 15.0f ? c : 15.0f);
}

// Codes of elements j and j + 16 of a block, as its byte j.
TM_HOST_DEVICE inline uint8_t PackNibbles(int low, int high) {
  return static_cast<uint8_t>(low | (high << 4));
}

// One block of 32 values as q4_0: 16 bytes of codes; returns d's f16 bits. Serial, for the
// host; the device's StoreKv takes the same steps over a warp.
TM_HOST_DEVICE inline uint16_t QuantizeKvBlockQ4_0(const float* x, uint8_t* codes) {
  KvPick pick = Q4_0Pick(x[0], 0);
  for (int j = 1; j < kQuantBlock; ++j) pick = PickGreater(pick, Q4_0Pick(x[j], j));
  const Q4_0Params p = Q4_0BlockParams(Q4_0BlockMax(pick, x[pick.index]));
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    codes[j] = PackNibbles(Q4_0Code(x[j], p.inv), Q4_0Code(x[j + kQuantBlock / 2], p.inv));
  }
  return p.d_bits;
}

// The bounds of an int4 group from its picks (`lo`, `hi`: the picked elements' values;
// `first`: element 0).
TM_HOST_DEVICE inline Int4Params Int4GroupBounds(float first, float lo, float hi) {
  return first == first ? Int4GroupParams(lo, hi) : Int4GroupParams(first, first);
}

// One group of 32 values as int4: 16 bytes of codes and scale_zero[0, 1] the f16 scale and
// zero. Serial, for the host; the device's StoreKv takes the same steps over a warp.
TM_HOST_DEVICE inline void QuantizeKvGroupInt4(const float* x, uint8_t* codes,
                                               uint16_t* scale_zero) {
  KvPick lo = Int4MinPick(x[0], 0), hi = Int4MaxPick(x[0], 0);
  for (int j = 1; j < kQuantBlock; ++j) {
    lo = PickGreater(lo, Int4MinPick(x[j], j));
    hi = PickGreater(hi, Int4MaxPick(x[j], j));
  }
  // A NaN first element leaves picks past the block (index + 32): not read then.
  const bool nan_first = x[0] != x[0];
  const Int4Params p = Int4GroupBounds(x[0], nan_first ? x[0] : x[lo.index],
                                       nan_first ? x[0] : x[hi.index]);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    codes[j] = PackNibbles(Int4Code(x[j], p), Int4Code(x[j + kQuantBlock / 2], p));
  }
  scale_zero[0] = p.scale_bits;
  scale_zero[1] = p.zero_bits;
}

// ---- KV rotation (llama.cpp's attn_rot over 4-bit K and V) ----------------------------------

// The block of the Walsh-Hadamard rotation of 4-bit keys, as the CPU's KvRotationOf: the
// largest power of two of 64 or more dividing head_dim; 0 (none) for heads not of whole 64s.
// Values (and the attention output) rotate in blocks of kKvValueRotation.
TM_HOST_DEVICE constexpr int KvKeyRotation(int head_dim) {
  if (head_dim % 64 != 0) return 0;
  int n = 64;
  while (head_dim % (2 * n) == 0) n *= 2;
  return n;
}
TM_HOST_DEVICE constexpr int KvValueRotation(int head_dim) { return head_dim % 64 == 0 ? 64 : 0; }

// 1 / sqrt(n), the rotation's normalization, computed on the host as the CPU's HadamardRotate
// computes it (the kernels take it as an argument).
inline float HadamardNorm(int n) { return 1.0f / std::sqrt(static_cast<float>(n)); }

// One butterfly of the rotation: the pair (a, b) at (j, j + h) becomes (a + b, a - b). `self`
// is this element's value, `other` its partner's; upper: this is element j + h. The device
// rotates a row held as element lane + 32 i in register i of each lane, strides 1..16 across
// lanes (a shuffle) and 32 and up across registers, each stage whole before the next, as the
// CPU's loops: the same sums, so the same bits.
TM_HOST_DEVICE inline float HadamardButterfly(float self, float other, bool upper) {
  return upper ? SubRn(other, self) : AddRn(self, other);
}

// ---- RoPE ----------------------------------------------------------------------------------

// The angle of rotation pair i at `position`, as kernels/cpu/elementwise.cc computes it:
// position * position_scale * base^(-2i/n_rot) / freq_factor, in double. inv_freq_i is
// base^(-2i/n_rot), computed once on the host with std::pow (the device's pow may round
// differently); factor is 1 without Llama 3 frequency factors.
TM_HOST_DEVICE inline double RopeAngle(int32_t position, float position_scale, double inv_freq_i,
                                       float factor) {
  const double p = static_cast<double>(position) * position_scale;
  return p * inv_freq_i / static_cast<double>(factor);
}

// The same with YaRN (ggml's rope_yarn): the scaled angle mixed with the unscaled one by
// pair i's ramp over [corr_low, corr_high], times ext_factor; RopeAngle's when it is 0.
TM_HOST_DEVICE inline double RopeYarnAngle(int32_t position, float position_scale,
                                           double inv_freq_i, float factor, int i,
                                           float ext_factor, float corr_low, float corr_high) {
  const double scaled = RopeAngle(position, position_scale, inv_freq_i, factor);
  if (ext_factor == 0.0f) return scaled;
  const double unscaled = RopeAngle(position, 1.0f, inv_freq_i, factor);
  const float span = corr_high - corr_low > 0.001f ? corr_high - corr_low : 0.001f;
  const float y = (static_cast<float>(i) - corr_low) / span;
  const float ramp = 1.0f - (y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y));
  const double mix = static_cast<double>(ramp * ext_factor);
  return scaled * (1.0 - mix) + unscaled * mix;
}

// Which two dimensions of a head pair i rotates.
TM_HOST_DEVICE inline void RopePair(bool neox, int i, int n_rot, int* i0, int* i1) {
  *i0 = neox ? i : 2 * i;
  *i1 = neox ? i + n_rot / 2 : 2 * i + 1;
}

// ---- online softmax (flash-decoding) -------------------------------------------------------

// A partial softmax-weighted sum over some positions: max score m, Σ exp(s - m) = l; the
// weighted sum of V rows (scaled by exp(-m)) is kept alongside by the caller.
struct SoftmaxPartial {
  float m;
  float l;
};

TM_HOST_DEVICE inline float ExpF(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  return std::exp(x);
#endif
}

// a * b + c with one rounding, on both sides: the compiler gets no say in contraction, so every
// instance of the online softmax rounds alike.
TM_HOST_DEVICE inline float MulAdd(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// The empty partial (no positions yet).
TM_HOST_DEVICE inline SoftmaxPartial EmptyPartial() { return SoftmaxPartial{-INFINITY, 0.0f}; }

// Merging partial b into a: returns the merged state and the factors by which a's and b's
// accumulated V sums must be multiplied (acc = acc_a * scale_a + acc_b * scale_b). An empty
// side gets factor 0, so -inf never meets -inf in a subtraction.
struct SoftmaxMerge {
  SoftmaxPartial merged;
  float scale_a;
  float scale_b;
};
TM_HOST_DEVICE inline SoftmaxMerge MergePartials(SoftmaxPartial a, SoftmaxPartial b) {
  if (b.l == 0.0f) return SoftmaxMerge{a, 1.0f, 0.0f};
  if (a.l == 0.0f) return SoftmaxMerge{b, 0.0f, 1.0f};
  const float m = a.m > b.m ? a.m : b.m;
  const float sa = ExpF(a.m - m);
  const float sb = ExpF(b.m - m);
  return SoftmaxMerge{SoftmaxPartial{m, MulAdd(a.l, sa, b.l * sb)}, sa, sb};
}

// Adds one score s to a partial: returns the factor for the accumulated sum and sets *p_out
// to the weight of the new V row (acc = acc * factor + p * v).
TM_HOST_DEVICE inline float AddScore(SoftmaxPartial* state, float s, float* p_out) {
  const float m = state->m > s ? state->m : s;
  const float factor = state->l == 0.0f ? 0.0f : ExpF(state->m - m);
  const float p = ExpF(s - m);
  state->l = MulAdd(state->l, factor, p);
  state->m = m;
  *p_out = p;
  return factor;
}

// ---- split-K partition of attention --------------------------------------------------------

// A query attending over `len` positions is split into chunks of SplitPositions(len)
// positions, each processed by its own thread block, then merged in order. The chunk is 64
// positions while that makes at most kMaxSplits splits and doubles beyond, so short contexts
// still spread over many blocks and long ones stay at <= kMaxSplits partials. The partition is
// a function of len alone (never of the batch), so a token's result is the same whatever runs
// beside it.
constexpr int kMinSplitPositions = 64;
constexpr int kMaxSplits = 64;

TM_HOST_DEVICE constexpr int32_t SplitPositions(int32_t len) {
  int32_t chunk = kMinSplitPositions;
  while (static_cast<int64_t>(chunk) * kMaxSplits < len) chunk *= 2;
  return chunk;
}
TM_HOST_DEVICE constexpr int NumSplits(int32_t len) {
  return len <= 0 ? 1 : static_cast<int>((len + SplitPositions(len) - 1) / SplitPositions(len));
}
TM_HOST_DEVICE constexpr int32_t SplitBegin(int split, int32_t len) {
  return split * SplitPositions(len);
}
TM_HOST_DEVICE constexpr int32_t SplitEnd(int split, int32_t len) {
  return (split + 1) * SplitPositions(len) < len ? (split + 1) * SplitPositions(len) : len;
}

// The first position a token at `pos` attends to under a sliding window of `window` positions
// (its own included; 0: no window), as the CPU's attention (FirstVisible there).
TM_HOST_DEVICE constexpr int32_t FirstVisible(int32_t window, int32_t pos) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

// Threads of the attention block: warps take positions round-robin within a split.
constexpr int kAttentionWarps = 4;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroup = 16;  // query heads per KV head processed together
// (token, query head) pairs one attention block holds: 4 per warp (attention_tiles.h).
constexpr int kMaxTilePairs = 16;

// Multi-head latent attention (KvCacheView::v_in_k: deepseek2's one row a token, the latent
// then the roped key, V the latent part) runs a wider instance of the same kernel: rows up to
// kMaxLatentHeadDim (DeepSeek's 512 + 64), kLatentWarps warps of 2 pairs (16 pairs a block
// still: registers for 18 dimensions a lane), V read from K's rows in shared memory (no V
// tiles), and any number of query heads a multiple of kMaxTilePairs (all 16 of V2-Lite in one
// block, V3's 128 in 8 blocks a token that each read the same rows).
constexpr int kMaxLatentHeadDim = 576;
constexpr int kLatentWarps = 8;

// Tokens per query tile for `group` query heads per KV head (>= 1).
TM_HOST_DEVICE constexpr int TileTokens(int group) {
  return group >= kMaxTilePairs ? 1 : kMaxTilePairs / group;
}

// Query heads of one KV head that one attention block takes (the rest of the group in
// further blocks along the grid's y), and how many such blocks a KV head has.
TM_HOST_DEVICE constexpr int BlockGroup(int group) {
  return group < kMaxTilePairs ? group : kMaxTilePairs;
}
TM_HOST_DEVICE constexpr int HeadChunks(int group) { return group / BlockGroup(group); }
// The query head of (token, head) pair `pair` of the block at grid row y (KV head y /
// HeadChunks, chunk y % HeadChunks of its group), and the pair's token in the block's tile.
TM_HOST_DEVICE constexpr int ChunkPairHead(int group, int y, int pair) {
  return y / HeadChunks(group) * group + y % HeadChunks(group) * BlockGroup(group) +
         pair % BlockGroup(group);
}
TM_HOST_DEVICE constexpr int ChunkPairToken(int group, int pair) {
  return pair / BlockGroup(group);
}

// Whether the attention kernel takes rows of head_dim for `group` query heads a KV head:
// GQA up to kMaxHeadDim and kMaxGroup; the latent rows (v_in_k) up to kMaxLatentHeadDim,
// any group up to kMaxGroup or a multiple of kMaxTilePairs, value_dim (V's width, the row's
// first value_dim elements; 0: all of it) at most head_dim.
TM_HOST_DEVICE constexpr bool AttentionShapeFits(int head_dim, int group, bool v_in_k,
                                                 int value_dim) {
  if (head_dim < 1 || group < 1) return false;
  if (!v_in_k) return head_dim <= kMaxHeadDim && group <= kMaxGroup && value_dim == 0;
  return head_dim <= kMaxLatentHeadDim && value_dim >= 0 && value_dim <= head_dim &&
         (group <= kMaxGroup || group % kMaxTilePairs == 0);
}

// ---- launch geometry -----------------------------------------------------------------------

TM_HOST_DEVICE constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The float-weight GEMV (gemv.cu; quantized weights: PlanMmvq of mmvq_math.h): one warp per
// output row, kGemvWarps warps per block, each block handling kGemvTokens tokens so a weight
// row is read once per kGemvTokens tokens.
constexpr int kGemvWarps = 4;
constexpr int kGemvTokens = 8;

struct GemvGrid {
  int64_t blocks_x;  // over rows
  int64_t blocks_y;  // over groups of kGemvTokens tokens
};
TM_HOST_DEVICE constexpr GemvGrid GemvGeometry(int64_t rows, int64_t n_tokens) {
  return GemvGrid{CeilDiv(rows, kGemvWarps), CeilDiv(n_tokens, kGemvTokens)};
}

// ---- attention's K/V tiles in shared memory ------------------------------------------------

// The split kernel (paged_attention.cu) stages K/V tiles of up to kAttentionTile positions in
// dynamic shared memory, kAttentionStages of them: tile i + 1 is copied in while tile i is
// computed. How many positions a tile holds never changes a pair's arithmetic (each pair
// walks its positions in order whatever the tiling).
constexpr int kAttentionTile = 16;
constexpr int kAttentionStages = 2;
constexpr int kCopyBytes = 16;  // one vector load / cp.async of a row piece
// What a block may take without cudaFuncSetAttribute's opt-in.
constexpr int64_t kDefaultSharedBytes = 48 * 1024;

TM_HOST_DEVICE constexpr int64_t RoundUp(int64_t x, int64_t m) { return CeilDiv(x, m) * m; }

// One stage is [K rows][V rows][K scales][V scales], the K rows, the V rows and the scales
// each a kCopyBytes multiple so each starts 16-byte aligned (V's scales follow K's, positions x
// scale_bytes on); the stages follow one another. V within K (v_in_k): [K rows][K scales].
struct AttentionTilePlan {
  int positions;         // per tile
  int row_bytes;         // one (slot, KV head) row of K or of V: head_dim elements
  int scale_bytes;       // one row's scales (int8/fp8: a float; 4-bit: KvRowScaleBytes)
  bool vector_rows;      // rows copied in kCopyBytes pieces (else element by element)
  int64_t kv_bytes;      // K (or V) rows of one stage
  int64_t stage_bytes;   // one stage, its scales included
  int64_t shared_bytes;  // all stages: the launch's dynamic shared memory
  bool v_in_k;           // no V rows or scales: V is read from the K rows
};

// Rows of head_dim elements of elem_bytes; aligned_bases: the pool's K and V start 16-byte
// aligned. 16-byte pieces need rows of whole pieces at aligned addresses (row r starts at
// r · row_bytes); other rows (head_dim 13 in f16, 40 in int8, an offset pool) go element by
// element. The tile halves until the stages fit kDefaultSharedBytes: only f32 rows of 192
// elements or more need it (16 positions of 1 KiB rows are 64 KiB double-buffered). Staying
// under the default spares cudaFuncSetAttribute's opt-in, a per-kernel setting that would
// have to be made (and remembered) before the first launch, graph captures included, and
// leaves room for more blocks per SM; 8 positions of 1 KiB K and V rows still put 16 KiB in
// flight per stage. The shared memory is sized by the real head_dim, not kMaxHeadDim.
// PlanAttentionTileRows takes the rows' bytes (the 4-bit types' head_dim / 2) and their
// scales' (q4_0's and int4's f16s; int8/fp8, and the float types where they go unused: 4).
// v_in_k: the stages hold K alone (latent rows of 576: 16 positions of f16 are 18 KiB a
// stage, f32's 8 positions as many).
TM_HOST_DEVICE constexpr AttentionTilePlan PlanAttentionTileRows(int row_bytes, int scale_bytes,
                                                                 bool aligned_bases,
                                                                 bool v_in_k = false) {
  AttentionTilePlan plan{};
  plan.row_bytes = row_bytes;
  plan.scale_bytes = scale_bytes;
  plan.vector_rows = aligned_bases && plan.row_bytes % kCopyBytes == 0;
  plan.v_in_k = v_in_k;
  const int arrays = v_in_k ? 1 : 2;  // K and V, or K alone
  for (plan.positions = kAttentionTile;; plan.positions /= 2) {
    plan.kv_bytes = RoundUp(int64_t{plan.positions} * plan.row_bytes, kCopyBytes);
    plan.stage_bytes = arrays * plan.kv_bytes +
                       RoundUp(arrays * int64_t{plan.positions} * scale_bytes, kCopyBytes);
    plan.shared_bytes = kAttentionStages * plan.stage_bytes;
    if (plan.shared_bytes <= kDefaultSharedBytes || plan.positions == 1) break;
  }
  return plan;
}
TM_HOST_DEVICE constexpr AttentionTilePlan PlanAttentionTiles(int head_dim, int elem_bytes,
                                                              bool aligned_bases,
                                                              bool v_in_k = false) {
  return PlanAttentionTileRows(head_dim * elem_bytes, 4, aligned_bases, v_in_k);
}

}  // namespace tokenmill::cuda
