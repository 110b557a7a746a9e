// The decode GEMV's arithmetic for the 256-element Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
// (gemv_kquant.cu), written once for the device and the host, in mmvq_math.h's design: a device
// layout with each 32-element sub-block's low quant nibbles in one 16-byte word (as a Q4_0
// block), the high bits and the scales unpacked at upload into what the kernel reads; q8_1
// activations (mmvq_math.h, one 32-block per sub-block); KMmvqDot, the host emulation of one
// (row, token) result bit for bit (tests/kernels/cuda/mmvq_kquant_math_test.cc against the CPU
// kernels, cuda_kernels_test against the GPU kernel).
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_math.h"

namespace tokenmill::cuda {

// Type ids as TensorType numbers them (GGUF's ggml_type).
enum KQuantTypeId : uint32_t {
  kWQ2_K = 10, kWQ3_K = 11, kWQ4_K = 12, kWQ5_K = 13, kWQ6_K = 14, kWIQ4_XS = 23
};

TM_HOST_DEVICE constexpr bool IsKQuant(uint32_t type) {
  return type == kWQ2_K || type == kWQ3_K || type == kWQ4_K || type == kWQ5_K || type == kWQ6_K ||
         type == kWIQ4_XS;
}
// Q4_K and Q5_K subtract a minimum per 32-element sub-block (a float m_w, times the q8_1 block's
// d · Σq); Q2_K one per 16 elements (4-bit integers, on the integer sums of the activations:
// KWordMinDot); Q3_K, Q6_K and IQ4_XS only scale.
TM_HOST_DEVICE constexpr bool KHasMin(uint32_t type) { return type == kWQ4_K || type == kWQ5_K; }
TM_HOST_DEVICE constexpr bool KHasMin16(uint32_t type) { return type == kWQ2_K; }

// IQ4_XS's nibbles index ggml's kvalues_iq4nl: Iq4NlLevel (kernel_math.h).

// The types GemvQ8_1 multiplies (packed rows, q8_1 activations): mmvq_math.h's and these.
TM_HOST_DEVICE constexpr bool TakesQ8_1(uint32_t type) {
  return IsQuantized(type) || IsKQuant(type);
}

constexpr int kKBlock = 256;   // elements per GGUF block (a super-block of 8 sub-blocks)
constexpr int kKSub = 32;      // elements per sub-block: one word of quants, one q8_1 block
constexpr int kKWordBytes = 16;

// Bytes of one GGUF block.
TM_HOST_DEVICE constexpr int KBlockBytes(uint32_t type) {
  return type == kWQ2_K   ? 84
         : type == kWQ3_K ? 110
         : type == kWQ4_K ? 144
         : type == kWQ5_K ? 176
         : type == kWQ6_K ? 210
                          : 136;  // IQ4_XS
}

// ---- the device layout ---------------------------------------------------------------------

// A packed row of S = cols / 32 sub-blocks and B = cols / 256 blocks, regions back to back:
//   quants   S x 16 bytes: sub-block s's low nibbles, byte j = element j | element 16 + j << 4
//            (Q3_K: its 3-bit quants + 4, whole; Q2_K: its 2-bit quants)
//   high     S x 4 (Q5_K: the fifth bits) or S x 8 (Q6_K: the two high bits), in the order the
//            kernel's 4-byte lanes take them (KHighBits)
//   scales   Q4_K / Q5_K: S scale bytes then S minimum bytes (the 6-bit values unpacked);
//            Q6_K, Q3_K: 2S int8 scales (one per 16 elements; Q3_K's minus 32); IQ4_XS: S int8
//            scales (ls - 32); Q2_K: 2S bytes, the file's (scale | min << 4 of 16 elements)
//   supers   B x (f16 d, f16 dmin) (Q4_K / Q5_K / Q2_K) or B x f16 d (Q3_K, Q6_K, IQ4_XS)
// padded to 16 bytes. Q4_K: 148 bytes a block (GGUF 144), Q5_K 180 (176), Q6_K 210 (210),
// IQ4_XS 138 (136), Q3_K 146 (110: a 4-bit word for 3-bit quants streams 1.33x the file's
// bytes, the price of one word format), Q2_K 148 (84: 1.76x, as many as Q4_K; a 2-bit word
// of its own would stream the file's 84). IQ4_XS's words hold level indices, which the kernel
// looks up.
TM_HOST_DEVICE constexpr int KHighBytes(uint32_t type) {
  return type == kWQ5_K ? 4 : type == kWQ6_K ? 8 : 0;
}
TM_HOST_DEVICE constexpr int KScaleBytes(uint32_t type) { return type == kWIQ4_XS ? 1 : 2; }
TM_HOST_DEVICE constexpr int KSuperBytes(uint32_t type) {
  return KHasMin(type) || KHasMin16(type) ? 4 : 2;
}

struct KRowLayout {
  int64_t high, scales, supers, bytes;  // offsets of the regions, and the padded row size
};
TM_HOST_DEVICE constexpr KRowLayout KLayoutOf(uint32_t type, int64_t cols) {
  const int64_t subs = cols / kKSub;
  const int64_t high = subs * kKWordBytes;
  const int64_t scales = high + subs * KHighBytes(type);
  const int64_t supers = scales + KScaleBytes(type) * subs;
  const int64_t end = supers + cols / kKBlock * KSuperBytes(type);
  return KRowLayout{high, scales, supers, CeilDiv(end, kKWordBytes) * kKWordBytes};
}
TM_HOST_DEVICE constexpr int64_t KPackedRowBytes(uint32_t type, int64_t cols) {
  return KLayoutOf(type, cols).bytes;
}

// The high bits of a sub-block's 32 quants, arranged so that the kernel's lane k (< 4) of the
// low-nibble word (elements 4k..4k+3 in its low nibbles, 16+4k..16+4k+3 in its high ones) finds
// its bytes' high bits by one shift and mask. Q5_K (one u32): bit 8b + k is the fifth bit of
// element 4k + b, bit 8b + 4 + k that of element 16 + 4k + b. Q6_K (two u32, k / 2 holds lane
// k): in byte b, bits 4(k%2)..+1 are element 4k + b's two high bits, the next two element
// 16 + 4k + b's.
TM_HOST_DEVICE inline int KHighBitPosition(uint32_t type, int e, int* word) {
  const int half = e / 16, k = (e % 16) / 4, b = e % 4;
  if (type == kWQ5_K) {
    *word = 0;
    return 8 * b + 4 * half + k;
  }
  *word = k / 2;
  return 8 * b + 4 * (k % 2) + 2 * half;
}

// The raw quants (unsigned: 2, 4, 5 or 6 bits; Q3_K's + 4; IQ4_XS's level indices) of GGUF
// block `in`, element e into q[e], and its sub-block scales: Q4_K / Q5_K scale[s] and min[s]
// (s < 8); Q6_K scale[i] (int8, i < 16); Q3_K scale[i] = its 6-bit scale - 32 (i < 16); Q2_K
// scale[i] and min[i] (4 bits, i < 16); IQ4_XS scale[s] = ls - 32.
TM_HOST_DEVICE inline void KUnpackBlock(uint32_t type, const uint8_t* in, uint8_t* q,
                                        int* scale, int* min) {
  if (type == kWQ2_K) {  // scales[16], qs[64]: element 128n + 32j + l at bits 2j of qs[32n + l]
    const uint8_t* qs = in + 16;
    for (int e = 0; e < kKBlock; ++e) {
      const int n = e / 128, j = (e % 128) / 32, l = e % 32;
      q[e] = static_cast<uint8_t>((qs[32 * n + l] >> (2 * j)) & 3);
    }
    for (int i = 0; i < 16; ++i) {
      scale[i] = in[i] & 0x0f;
      min[i] = in[i] >> 4;
    }
    return;
  }
  if (type == kWQ3_K) {
    const uint8_t* hmask = in;
    const uint8_t* qs = in + 32;
    for (int e = 0; e < kKBlock; ++e) {
      const int n = e / 128, j = (e % 128) / 32, l = e % 32;
      const int low = (qs[32 * n + l] >> (2 * j)) & 3;
      q[e] = static_cast<uint8_t>(low + (((hmask[l] >> (4 * n + j)) & 1) ? 4 : 0));
    }
    // ggml's 12 bytes of 16 6-bit scales: the low nibbles in bytes 0..7 (scale i < 8: byte i's
    // low nibble, i >= 8: byte i - 8's high one), the two high bits in bytes 8..11.
    const uint8_t* packed = in + 96;
    for (int i = 0; i < 16; ++i) {
      const int low = i < 8 ? (packed[i] & 0x0f) : (packed[i - 8] >> 4);
      const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
      scale[i] = (low | (high << 4)) - 32;
    }
    return;
  }
  if (type == kWIQ4_XS) {
    const int scales_h = LoadU16(in + 2);
    for (int s = 0; s < 8; ++s) {
      const int ls = ((in[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | (((scales_h >> (2 * s)) & 3) << 4);
      scale[s] = ls - 32;
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = in[8 + 16 * s + j];
        q[32 * s + j] = static_cast<uint8_t>(byte & 0x0f);
        q[32 * s + 16 + j] = static_cast<uint8_t>(byte >> 4);
      }
    }
    return;
  }
  if (type == kWQ6_K) {
    const uint8_t* ql = in;
    const uint8_t* qh = in + 128;
    for (int e = 0; e < kKBlock; ++e) {
      const int n = e / 128, quarter = (e % 128) / 32, l = e % 32;
      const uint8_t lo = ql[64 * n + l + 32 * (quarter & 1)];
      const int low = quarter >= 2 ? lo >> 4 : lo & 0x0f;
      q[e] = static_cast<uint8_t>(low | (((qh[32 * n + l] >> (2 * quarter)) & 3) << 4));
    }
    for (int i = 0; i < 16; ++i) scale[i] = static_cast<int8_t>(in[192 + i]);
    return;
  }
  const uint8_t* packed_scales = in + 4;
  for (int j = 0; j < 8; ++j) {  // ggml's get_scale_min_k4
    if (j < 4) {
      scale[j] = packed_scales[j] & 63;
      min[j] = packed_scales[j + 4] & 63;
    } else {
      scale[j] = (packed_scales[j + 4] & 0x0f) | ((packed_scales[j - 4] >> 6) << 4);
      min[j] = (packed_scales[j + 4] >> 4) | ((packed_scales[j] >> 6) << 4);
    }
  }
  const uint8_t* qs = in + (type == kWQ5_K ? 48 : 16);
  for (int e = 0; e < kKBlock; ++e) {
    const int s = e / 32, l = e % 32;
    const uint8_t byte = qs[32 * (s / 2) + l];
    int v = s % 2 == 0 ? byte & 0x0f : byte >> 4;
    if (type == kWQ5_K) v |= ((in[16 + l] >> s) & 1) << 4;
    q[e] = static_cast<uint8_t>(v);
  }
}

// One GGUF row (cols / 256 blocks) into its packed form (KPackedRowBytes).
TM_HOST_DEVICE inline void KPackRow(uint32_t type, const uint8_t* gguf, int64_t cols,
                                    uint8_t* packed) {
  const KRowLayout L = KLayoutOf(type, cols);
  const int64_t subs = cols / kKSub;
  for (int64_t i = 0; i < L.bytes; ++i) packed[i] = 0;
  for (int64_t blk = 0; blk < cols / kKBlock; ++blk) {
    const uint8_t* in = gguf + blk * KBlockBytes(type);
    uint8_t q[kKBlock];
    int scale[16], min[16];
    KUnpackBlock(type, in, q, scale, min);
    for (int s = 0; s < 8; ++s) {
      const int64_t sub = blk * 8 + s;
      uint8_t* word = packed + sub * kKWordBytes;
      const uint8_t* qs = q + 32 * s;
      for (int j = 0; j < 16; ++j) {
        word[j] = static_cast<uint8_t>((qs[j] & 0x0f) | ((qs[16 + j] & 0x0f) << 4));
      }
      uint8_t* high = packed + L.high + sub * KHighBytes(type);
      for (int e = 0; e < kKSub && KHighBytes(type) > 0; ++e) {
        int u32;
        const int bit = KHighBitPosition(type, e, &u32);
        const int bits = type == kWQ5_K ? (qs[e] >> 4) : ((qs[e] >> 4) & 3);
        uint8_t& byte = high[4 * u32 + bit / 8];
        byte = static_cast<uint8_t>(byte | (bits << (bit % 8)));
      }
      if (type == kWQ6_K || type == kWQ3_K) {
        packed[L.scales + 2 * sub] = static_cast<uint8_t>(scale[2 * s]);
        packed[L.scales + 2 * sub + 1] = static_cast<uint8_t>(scale[2 * s + 1]);
      } else if (type == kWQ2_K) {
        for (int h = 0; h < 2; ++h) {
          packed[L.scales + 2 * sub + h] =
              static_cast<uint8_t>(scale[2 * s + h] | (min[2 * s + h] << 4));
        }
      } else if (type == kWIQ4_XS) {
        packed[L.scales + sub] = static_cast<uint8_t>(scale[s]);
      } else {
        packed[L.scales + sub] = static_cast<uint8_t>(scale[s]);
        packed[L.scales + subs + sub] = static_cast<uint8_t>(min[s]);
      }
    }
    const int d_at = type == kWQ6_K ? 208 : type == kWQ3_K ? 108 : type == kWQ2_K ? 80 : 0;
    for (int i = 0; i < KSuperBytes(type); ++i) {
      packed[L.supers + blk * KSuperBytes(type) + i] = in[d_at + i];
    }
  }
}

// ---- reading a packed row (the emulation and the element accessor) --------------------------

// Quant k (< 32) of sub-block s, as the integer the kernel multiplies (Q6_K's minus 32,
// IQ4_XS's level).
TM_HOST_DEVICE inline int KWordQuant(uint32_t type, const uint8_t* row, int64_t cols, int64_t s,
                                     int k) {
  const uint8_t* word = row + s * kKWordBytes;
  int q = k < 16 ? (word[k] & 0x0f) : (word[k - 16] >> 4);
  if (type == kWQ4_K || type == kWQ2_K) return q;
  if (type == kWQ3_K) return q - 4;
  if (type == kWIQ4_XS) return Iq4NlLevel(q);
  int u32;
  const int bit = KHighBitPosition(type, k, &u32);
  const uint8_t* high = row + KLayoutOf(type, cols).high + s * KHighBytes(type) + 4 * u32;
  const int h = high[bit / 8] >> (bit % 8);
  return type == kWQ5_K ? (q | ((h & 1) << 4)) : (q | ((h & 3) << 4)) - 32;
}

// Sub-block s's scales as the kernel applies them (sub_scale holds 4 ints). Q4_K / Q5_K: the
// float d · scale (exact: an f16 times 6 bits) and dmin · min; sub_scale[0], [1] 1 for both
// halves. Q6_K: d, and the int8 scale of each half of 16 (sub_scale[0], [1]), applied to the
// integer sums (Q3_K alike); IQ4_XS: d, its scale twice. Q2_K: d and dmin, the 4-bit scales of
// the halves in sub_scale[0], [1] and their minimums in sub_scale[2], [3]. sub_scale[2], [3]
// are 0 for the other types.
TM_HOST_DEVICE inline void KWordScales(uint32_t type, const uint8_t* row, int64_t cols, int64_t s,
                                       float* d_w, float* m_w, int* sub_scale) {
  const KRowLayout L = KLayoutOf(type, cols);
  const uint8_t* super = row + L.supers + s / 8 * KSuperBytes(type);
  const float d = HalfBitsToFloat(LoadU16(super));
  sub_scale[2] = sub_scale[3] = 0;
  if (type == kWQ2_K) {
    *d_w = d;
    *m_w = HalfBitsToFloat(LoadU16(super + 2));
    for (int h = 0; h < 2; ++h) {
      sub_scale[h] = row[L.scales + 2 * s + h] & 0x0f;
      sub_scale[2 + h] = row[L.scales + 2 * s + h] >> 4;
    }
    return;
  }
  if (type == kWQ6_K || type == kWQ3_K) {
    *d_w = d;
    *m_w = 0.0f;
    sub_scale[0] = static_cast<int8_t>(row[L.scales + 2 * s]);
    sub_scale[1] = static_cast<int8_t>(row[L.scales + 2 * s + 1]);
    return;
  }
  if (type == kWIQ4_XS) {
    *d_w = d;
    *m_w = 0.0f;
    sub_scale[0] = sub_scale[1] = static_cast<int8_t>(row[L.scales + s]);
    return;
  }
  *d_w = d * static_cast<float>(row[L.scales + s]);
  *m_w = HalfBitsToFloat(LoadU16(super + 2)) * static_cast<float>(row[L.scales + cols / kKSub + s]);
  sub_scale[0] = sub_scale[1] = 1;
}

// Element i of a packed row, as the reference dequantization (kernels/dequantize_k_quants.cc)
// of the GGUF row computes it: (d · scale) · q - dmin · min, (d · scale) · (q - 32) or
// (d · scale) · level (Q2_K: (d · scale) · q - (dmin · min), each product exact).
TM_HOST_DEVICE inline float KPackedElement(uint32_t type, const uint8_t* row, int64_t cols,
                                           int64_t i) {
  const int64_t s = i / kKSub;
  const int k = static_cast<int>(i % kKSub);
  float d_w, m_w;
  int sub[4];
  KWordScales(type, row, cols, s, &d_w, &m_w, sub);
  const float q = static_cast<float>(KWordQuant(type, row, cols, s, k));
  if (KHasMin16(type)) {
    return d_w * static_cast<float>(sub[k / 16]) * q - m_w * static_cast<float>(sub[2 + k / 16]);
  }
  if (!KHasMin(type)) return d_w * static_cast<float>(sub[k / 16]) * q;
  return d_w * q - m_w;
}

// ---- the dot product -----------------------------------------------------------------------

// As mmvq_math.h's MmvqDot, a sub-block a word: word s to lane s % 32, each lane folding its
// words in order: sumi = Σ q_w q_a over the 32 elements (Q6_K, Q3_K, Q2_K: scale_0 · Σ over the
// first 16 + scale_1 · Σ over the last 16, IQ4_XS: scale · Σ; all exact integers, |sumi| <
// 2^24), acc = fma(d_w · d_a, sumi, acc), and for Q4_K / Q5_K then acc = fma(-m_w, d_a · Σq_a,
// acc); for Q2_K then acc = fma(-(dmin · d_a), summ, acc), summ = min_0 · Σ q_a over the first
// 16 + min_1 · Σ over the last 16 (KWordMinDot; d_w · d_a and dmin · d_a are exact: two f16s).
// WarpSum's butterfly after.
TM_HOST_DEVICE inline float KMmvqStep(uint32_t type, float acc, int32_t sumi, int32_t summ,
                                      float d_w, float m_w, const float* ds) {
  acc = MulAdd(d_w * ds[0], static_cast<float>(sumi), acc);
  if (KHasMin16(type)) return MulAdd(-(m_w * ds[0]), static_cast<float>(summ), acc);
  return KHasMin(type) ? MulAdd(-m_w, ds[1], acc) : acc;
}

// The kernel's integer sum of one sub-block (KWordDot), written once: the device's intrinsics,
// on the host plain loops that compute the same, so that the CPU tests check the bit tricks
// against KWordQuant (KMmvqDot itself sums element by element).
TM_HOST_DEVICE inline int32_t Dp4a(uint32_t a, uint32_t b, int32_t c) {  // Σ signed byte products
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int8_t>(static_cast<uint8_t>(a >> (8 * i))) *
         static_cast<int8_t>(static_cast<uint8_t>(b >> (8 * i)));
  }
  return c;
#endif
}
TM_HOST_DEVICE inline uint32_t Vsub4(uint32_t a, uint32_t b) {  // bytewise a - b, mod 256
#ifdef __CUDA_ARCH__
  return __vsub4(a, b);
#else
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xffu) << (8 * i);
  return r;
#endif
}
TM_HOST_DEVICE inline uint32_t BytePerm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else  // byte n of the result: byte (s >> 4n) & 7 of y:x
  const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * n)) & 7))) & 0xffu) << (8 * n);
  }
  return r;
#endif
}

// The IQ4_XS levels of the 4 level indices in the bytes of idx (each < 16): BytePerm picks
// bytes of the table's low or high 8 levels by each index's low 3 bits, bit 3 chooses which.
TM_HOST_DEVICE inline uint32_t Iq4NlLevels4(uint32_t idx) {
  constexpr uint32_t kT0 = 0xbfad9881u, kT1 = 0xf6eaddcfu, kT2 = 0x26190d01u, kT3 = 0x71594535u;
  const uint32_t sel = (idx & 0x7u) | ((idx >> 4) & 0x70u) | ((idx >> 8) & 0x700u) |
                       ((idx >> 12) & 0x7000u);
  const uint32_t low = BytePerm(kT0, kT1, sel), high = BytePerm(kT2, kT3, sel);
  const uint32_t pick = ((idx >> 3) & 0x01010101u) * 0xffu;
  return (low & ~pick) | (high & pick);
}

// Σ over sub-block s of q_w q_a as the kernel takes it (Q6_K: each half times its scale,
// IQ4_XS: times its scale): q the word's 4 u32 (lane k: elements 4k..4k+3 in the low nibbles,
// 16+4k.. in the high ones), high its high bits (KHighBitPosition), act the 32 activations as 8
// u32 (elements 0..15, then 16..31), sub from KWordScales.
TM_HOST_DEVICE inline int32_t KWordDot(uint32_t type, const uint32_t* q, const uint32_t* high,
                                       const int32_t* act, const int* sub) {
  int32_t s0 = 0, s1 = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int k = 0; k < 4; ++k) {
    uint32_t lo = q[k] & 0x0f0f0f0fu, hi = (q[k] >> 4) & 0x0f0f0f0fu;
    if (type == kWQ5_K) {
      lo |= ((high[0] >> k) & 0x01010101u) << 4;
      hi |= ((high[0] >> (k + 4)) & 0x01010101u) << 4;
    } else if (type == kWQ6_K) {
      const uint32_t h = high[k / 2] >> (4 * (k % 2));
      lo = Vsub4(lo | ((h & 0x03030303u) << 4), 0x20202020u);
      hi = Vsub4(hi | ((h & 0x0c0c0c0cu) << 2), 0x20202020u);
    } else if (type == kWQ3_K) {
      lo = Vsub4(lo, 0x04040404u);
      hi = Vsub4(hi, 0x04040404u);
    } else if (type == kWIQ4_XS) {
      lo = Iq4NlLevels4(lo);
      hi = Iq4NlLevels4(hi);
    }
    s0 = Dp4a(lo, static_cast<uint32_t>(act[k]), s0);
    s1 = Dp4a(hi, static_cast<uint32_t>(act[4 + k]), s1);
  }
  return sub[0] * s0 + sub[1] * s1;
}

// Q2_K's minimum sum of sub-block s as the kernel takes it: min_0 · Σ q_a over elements 0..15 +
// min_1 · Σ over 16..31 (sub[2], sub[3] from KWordScales); 0 for the other types.
TM_HOST_DEVICE inline int32_t KWordMinDot(uint32_t type, const int32_t* act, const int* sub) {
  if (!KHasMin16(type)) return 0;
  int32_t s0 = 0, s1 = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int k = 0; k < 4; ++k) {
    s0 = Dp4a(0x01010101u, static_cast<uint32_t>(act[k]), s0);
    s1 = Dp4a(0x01010101u, static_cast<uint32_t>(act[4 + k]), s1);
  }
  return sub[2] * s0 + sub[3] * s1;
}

constexpr int kKMmvqLanes = 32;

// y for one packed row and one token's q8_1 activations, exactly as the GPU kernel computes it.
inline float KMmvqDot(uint32_t type, const uint8_t* row, const uint8_t* x_q8, int64_t cols) {
  const int64_t subs = cols / kKSub;
  const int8_t* qa = reinterpret_cast<const int8_t*>(x_q8);
  const float* ds = reinterpret_cast<const float*>(x_q8 + cols);
  float lane[kKMmvqLanes];
  for (int l = 0; l < kKMmvqLanes; ++l) {
    float acc = 0.0f;
    for (int64_t s = l; s < subs; s += kKMmvqLanes) {
      float d_w, m_w;
      int sub[4];
      KWordScales(type, row, cols, s, &d_w, &m_w, sub);
      int32_t half_sums[2] = {0, 0}, half_acts[2] = {0, 0};
      for (int k = 0; k < kKSub; ++k) {
        half_sums[k / 16] += KWordQuant(type, row, cols, s, k) * qa[s * kKSub + k];
        half_acts[k / 16] += qa[s * kKSub + k];
      }
      const int32_t sumi = sub[0] * half_sums[0] + sub[1] * half_sums[1];
      const int32_t summ = sub[2] * half_acts[0] + sub[3] * half_acts[1];
      acc = KMmvqStep(type, acc, sumi, summ, d_w, m_w, ds + 2 * s);
    }
    lane[l] = acc;
  }
  for (int offset = kKMmvqLanes / 2; offset > 0; offset /= 2) {
    float next[kKMmvqLanes];
    for (int l = 0; l < kKMmvqLanes; ++l) next[l] = lane[l] + lane[l ^ offset];
    for (int l = 0; l < kKMmvqLanes; ++l) lane[l] = next[l];
  }
  return lane[0];
}

}  // namespace tokenmill::cuda
