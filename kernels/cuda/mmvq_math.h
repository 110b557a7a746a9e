// The arithmetic of the decode GEMV over quantized weights (llama.cpp's MMVQ style, gemv.cu),
// written once for the device and the host: the device layout of the block-32 weight types
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL: quants in 16-byte words) and the bit operations that
// turn a word into int8 quants, the q8_1 activations (as the CPU's QuantizeActivations), the
// launch plan, and MmvqDot, the host emulation of one (row, token) result bit for bit
// (tests/kernels/cuda: against the CPU kernels here, against the GPU kernel on a GPU).
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/mmvq_kquant_math.h"

namespace tokenmill::cuda {

// ---- packed weight rows --------------------------------------------------------------------

// A packed row of `blocks` blocks: the blocks' quants back to back (16 bytes a block for the
// 4- and 5-bit types, nibbles as in GGUF; 32 for Q8_0), then for Q5_0 / Q5_1 each block's
// fifth bits as a u32 (spread: FifthBitPosition), then their f16 scales (d, or d and m), padded
// to 16 bytes so every row's quants start 16-byte aligned. A 16-byte word holds the quants of
// one 4- or 5-bit block or of half a Q8_0 block; no more bytes than the GGUF row, but padding.
constexpr int kWordBytes = 16;

TM_HOST_DEVICE constexpr int PackedQuantBytes(uint32_t type) { return type == kWQ8_0 ? 32 : 16; }
TM_HOST_DEVICE constexpr int PackedHighBytes(uint32_t type) { return HasFifthBits(type) ? 4 : 0; }
TM_HOST_DEVICE constexpr int PackedScaleBytes(uint32_t type) { return HasMin(type) ? 4 : 2; }
TM_HOST_DEVICE constexpr int64_t PackedRowBytes(uint32_t type, int64_t cols) {
  const int64_t blocks = cols / kQuantBlock;
  return CeilDiv(blocks * (PackedQuantBytes(type) + PackedHighBytes(type) +
                           PackedScaleBytes(type)),
                 kWordBytes) *
         kWordBytes;
}
// 16-byte words of quants in a row, and the elements one word holds.
TM_HOST_DEVICE constexpr int64_t PackedWords(uint32_t type, int64_t cols) {
  return cols / kQuantBlock * PackedQuantBytes(type) / kWordBytes;
}
TM_HOST_DEVICE constexpr int WordElements(uint32_t type) { return type == kWQ8_0 ? 16 : 32; }

// Where a packed row's fifth bits and scales start.
TM_HOST_DEVICE constexpr int64_t PackedHighOffset(uint32_t type, int64_t cols) {
  return cols / kQuantBlock * PackedQuantBytes(type);
}
TM_HOST_DEVICE constexpr int64_t PackedScaleOffset(uint32_t type, int64_t cols) {
  return cols / kQuantBlock * (PackedQuantBytes(type) + PackedHighBytes(type));
}

// The bit of the packed u32 that holds element e's fifth bit. A word's i-th 32-bit int holds
// the nibbles of elements 4i..4i+3 (low) and 16+4i..16+4i+3 (high), one a byte; so byte b of
// the u32 holds the fifth bits of elements 4i + b in bit i and of 16 + 4i + b in bit 4 + i,
// and one shift and one mask put the fifth bits of four elements at bit 4 of their bytes
// (FiveBitQuants).
TM_HOST_DEVICE constexpr int FifthBitPosition(int e) {
  return 8 * (e & 3) + 4 * (e >> 4) + ((e >> 2) & 3);
}
TM_HOST_DEVICE inline uint32_t SpreadFifthBits(uint32_t qh) {
  uint32_t spread = 0;
  for (int e = 0; e < kQuantBlock; ++e) spread |= ((qh >> e) & 1u) << FifthBitPosition(e);
  return spread;
}

TM_HOST_DEVICE inline uint32_t LoadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// One GGUF row (cols / 32 blocks of UnitBytes(type): scales, fifth bits, quants) into its
// packed form (PackedRowBytes).
TM_HOST_DEVICE inline void PackRow(uint32_t type, const uint8_t* gguf, int64_t cols,
                                   uint8_t* packed) {
  const int64_t blocks = cols / kQuantBlock;
  const int qb = PackedQuantBytes(type), hb = PackedHighBytes(type), sb = PackedScaleBytes(type);
  uint8_t* highs = packed + PackedHighOffset(type, cols);
  uint8_t* scales = packed + PackedScaleOffset(type, cols);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* in = gguf + b * UnitBytes(type);
    for (int i = 0; i < sb; ++i) scales[b * sb + i] = in[i];
    if (hb != 0) {
      const uint32_t spread = SpreadFifthBits(LoadU32(in + sb));
      for (int i = 0; i < 4; ++i) highs[b * 4 + i] = static_cast<uint8_t>(spread >> (8 * i));
    }
    for (int i = 0; i < qb; ++i) packed[b * qb + i] = in[sb + hb + i];
  }
  for (int64_t i = blocks * (qb + hb + sb); i < PackedRowBytes(type, cols); ++i) packed[i] = 0;
}

// The fifth bits of block b of a packed Q5_0 / Q5_1 row, as PackRow spread them.
TM_HOST_DEVICE inline uint32_t PackedFifthBits(uint32_t type, const uint8_t* row, int64_t cols,
                                               int64_t b) {
  const uint8_t* p = row + PackedHighOffset(type, cols) + 4 * b;
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);  // 4-aligned: rows start 16-aligned
#else
  return LoadU32(p);
#endif
}

// Element i of a packed row, as DequantElement of the GGUF row.
TM_HOST_DEVICE inline float PackedElement(uint32_t type, const uint8_t* row, int64_t cols,
                                          int64_t i) {
  const int64_t b = i / kQuantBlock;
  const int j = static_cast<int>(i % kQuantBlock);
  const uint8_t* qs = row + b * PackedQuantBytes(type);
  const uint8_t* s = row + PackedScaleOffset(type, cols) + b * PackedScaleBytes(type);
  const float d = HalfBitsToFloat(LoadU16(s));
  const float m = HasMin(type) ? HalfBitsToFloat(LoadU16(s + 2)) : 0.0f;
  switch (type) {
    case kWQ4_0: return DequantQ4_0(qs, j, d);
    case kWQ4_1: return DequantQ4_1(qs, j, d, m);
    case kWIQ4_NL: return DequantIq4Nl(qs, j, d);
    case kWQ5_0: case kWQ5_1: {
      const uint32_t fifth = PackedFifthBits(type, row, cols, b);
      return DequantQ5(type, qs, static_cast<int>((fifth >> FifthBitPosition(j)) & 1u), j, d, m);
    }
    default: return DequantQ8_0(qs, j, d);
  }
}

// Element i of a device weight row (weight_upload.h): packed for the quantized types.
TM_HOST_DEVICE inline float DeviceElement(uint32_t type, const uint8_t* row, int64_t cols,
                                          int64_t i) {
  if (IsKQuant(type)) return KPackedElement(type, row, cols, i);
  return IsQuantized(type) ? PackedElement(type, row, cols, i) : DequantElement(type, row, i);
}

// ---- a lane's quants: the kernel's bit operations, on the host too -------------------------

// BytePerm (__byte_perm and its host half): mmvq_kquant_math.h.

// Int i (< 4) of a 4- or 5-bit word holds bytes qs[4i..4i+3]: the four int8 quants of elements
// 4i..4i+3 (high == false: the low nibbles) or 16+4i..16+4i+3 (high: the high nibbles), as
// __dp4a multiplies them. Q5_x: the fifth bits from the spread u32 (FifthBitPosition) with a
// shift and a mask; Q5_0's q - 16 as nibble + 0xf0 where the fifth bit is clear (no carries).
TM_HOST_DEVICE inline uint32_t FiveBitQuants(uint32_t type, uint32_t qs, uint32_t fifth, int i,
                                             bool high) {
  const uint32_t nibbles = (high ? qs >> 4 : qs) & 0x0f0f0f0fu;
  if (type == kWQ5_0) fifth = ~fifth;
  const uint32_t bit4 = (high ? fifth >> i : fifth << (4 - i)) & 0x10101010u;
  return type == kWQ5_0 ? nibbles + bit4 * 15u : nibbles | bit4;
}

// IQ4_NL: the levels of both nibbles of int `qs` (elements 4i..4i+3 into *low, 16+4i.. into
// *high). A byte permute looks up 4 nibbles' low 3 bits at once, in levels 0..7 and 8..15, and
// a third picks by each nibble's bit 3; over the 8 nibbles in the order they lie (a byte's low
// nibble, then its high one) that gives levels interleaved, which two more permutes sort.
TM_HOST_DEVICE inline void Iq4NlQuants(uint32_t qs, uint32_t* low, uint32_t* high) {
  uint32_t mixed[2];  // elements 4i, 16+4i, 4i+1, 17+4i; then 4i+2, 18+4i, 4i+3, 19+4i
  for (int half = 0; half < 2; ++half) {
    const uint32_t nibbles = qs >> (16 * half);  // the selector reads the low 16 bits
    const uint32_t first = BytePerm(kIq4NlLevels0, kIq4NlLevels1, nibbles);
    const uint32_t second = BytePerm(kIq4NlLevels2, kIq4NlLevels3, nibbles);
    mixed[half] = BytePerm(first, second, 0x3210u | ((nibbles & 0x8888u) >> 1));
  }
  *low = BytePerm(mixed[0], mixed[1], 0x6420u);
  *high = BytePerm(mixed[0], mixed[1], 0x7531u);
}

// ---- q8_1 activations ----------------------------------------------------------------------

// A token's activations: cols int8 quants, then per block of 32 its scale d and d · Σq as
// floats (both rounded through f16), padded to 16 bytes; tokens Q8_1TokenBytes apart.
TM_HOST_DEVICE constexpr int64_t Q8_1TokenBytes(int64_t cols) {
  return CeilDiv(cols + cols / kQuantBlock * 8, kWordBytes) * kWordBytes;
}

TM_HOST_DEVICE inline float RoundThroughHalf(float x) {
#ifdef __CUDACC__
  return __half2float(__float2half_rn(x));
#else
  return HalfToFloat(FloatToHalf(x));
#endif
}

// Block b (32 floats at x) of a token, as the CPU's QuantizeActivations: amax, d = amax / 127,
// q = round-half-even(x · 127 / amax); q into qs[0..31], (d, d · Σq) into ds[0..1].
TM_HOST_DEVICE inline void QuantizeQ8_1Block(const float* x, int8_t* qs, float* ds) {
  float amax = 0.0f;
  for (int i = 0; i < kQuantBlock; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    amax = amax < a ? a : amax;  // std::max's comparison
  }
  const float d = amax / 127.0f;
  const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32_t sum = 0;
  for (int i = 0; i < kQuantBlock; ++i) {
    const int q = static_cast<int>(RoundHalfEven(x[i] * inv));
    qs[i] = static_cast<int8_t>(q);
    sum += q;
  }
  ds[0] = RoundThroughHalf(d);
  ds[1] = RoundThroughHalf(d * static_cast<float>(sum));
}

// ---- the dot product -----------------------------------------------------------------------

// Lanes of a warp take the row's words round-robin (word w to lane w % 32); each folds its
// words into one float in order: acc = fma(d_w · d_a, Σ q_w q_a, acc) (the integer sum over
// the word's elements, exact; Q4_0's quants minus 8, Q5_0's minus 16, IQ4_NL's levels), and
// for Q4_1 / Q5_1 then acc = fma(m_w, d_a · Σq_a, acc). The 32 lane sums meet in WarpSum's
// butterfly (offsets 16, 8, 4, 2, 1).
constexpr int kMmvqLanes = 32;

// Word w's contribution to a lane's accumulator (both the emulation and the kernel use it
// after computing `sumi` their own way: integer sums are exact whatever the order).
TM_HOST_DEVICE inline float MmvqStep(uint32_t type, float acc, int32_t sumi, float d_w, float m_w,
                                     const float* ds) {
  acc = MulAdd(d_w * ds[0], static_cast<float>(sumi), acc);
  return HasMin(type) ? MulAdd(m_w, ds[1], acc) : acc;
}

// The scales (d, m) of the block holding word w of a packed row.
TM_HOST_DEVICE inline void WordScales(uint32_t type, const uint8_t* row, int64_t cols, int64_t w,
                                      float* d, float* m) {
  const int64_t b = w * WordElements(type) / kQuantBlock;
  const uint8_t* s = row + PackedScaleOffset(type, cols) + b * PackedScaleBytes(type);
  *d = HalfBitsToFloat(LoadU16(s));
  *m = HasMin(type) ? HalfBitsToFloat(LoadU16(s + 2)) : 0.0f;
}

// Quant k (< WordElements) of word w of a packed row, as the integer the kernel multiplies,
// element by element (the kernel's bit operations, FiveBitQuants and Iq4NlQuants, are tested
// against it).
TM_HOST_DEVICE inline int WordQuant(uint32_t type, const uint8_t* row, int64_t cols, int64_t w,
                                    int k) {
  const uint8_t* word = row + w * kWordBytes;
  if (type == kWQ8_0) return static_cast<int8_t>(word[k]);
  const int q = Nibble(word, k);
  switch (type) {
    case kWQ4_0: return q - 8;
    case kWIQ4_NL: return Iq4NlLevel(q);
    case kWQ5_0: case kWQ5_1: {
      const uint32_t fifth = PackedFifthBits(type, row, cols, w);  // a word is a block
      const int q5 = q | static_cast<int>((fifth >> FifthBitPosition(k)) & 1u) << 4;
      return type == kWQ5_0 ? q5 - 16 : q5;
    }
    default: return q;
  }
}

// y for one packed row and one token's q8_1 activations, exactly as the GPU kernel computes it.
inline float MmvqDot(uint32_t type, const uint8_t* row, const uint8_t* x_q8, int64_t cols) {
  const int64_t words = PackedWords(type, cols);
  const int8_t* qa = reinterpret_cast<const int8_t*>(x_q8);
  const float* ds = reinterpret_cast<const float*>(x_q8 + cols);
  float lane[kMmvqLanes];
  for (int l = 0; l < kMmvqLanes; ++l) {
    float acc = 0.0f;
    for (int64_t w = l; w < words; w += kMmvqLanes) {
      int32_t sumi = 0;
      const int64_t first = w * WordElements(type);
      for (int k = 0; k < WordElements(type); ++k) {
        sumi += WordQuant(type, row, cols, w, k) * qa[first + k];
      }
      float d, m;
      WordScales(type, row, cols, w, &d, &m);
      acc = MmvqStep(type, acc, sumi, d, m, ds + 2 * (first / kQuantBlock));
    }
    lane[l] = acc;
  }
  for (int offset = kMmvqLanes / 2; offset > 0; offset /= 2) {
    float next[kMmvqLanes];
    for (int l = 0; l < kMmvqLanes; ++l) next[l] = lane[l] + lane[l ^ offset];
    for (int l = 0; l < kMmvqLanes; ++l) lane[l] = next[l];
  }
  return lane[0];
}

// ---- launch plan ---------------------------------------------------------------------------

// Each warp computes rows_per_warp rows for tokens_per_pass tokens (a weight word is read once
// for all of them); warps_per_block warps a block; the grid's y walks passes of tokens. Up to
// 8 tokens a pass; fewer rows per warp the more tokens, so a lane holds at most 8 sums.
constexpr int kMmvqMaxTokens = 8;
constexpr int kMmvqWarps = 4;

struct MmvqPlan {
  int tokens_per_pass;  // 1, 2, 4 or 8
  int rows_per_warp;    // 2 or 1
  int64_t blocks_x;     // over rows
  int64_t passes;       // blocks_y, over tokens
};
TM_HOST_DEVICE constexpr MmvqPlan PlanMmvq(int64_t rows, int64_t n_tokens) {
  const int tokens = n_tokens >= 8 ? 8 : n_tokens >= 3 ? 4 : n_tokens == 2 ? 2 : 1;
  const int rows_per_warp = tokens == 8 ? 1 : 2;
  return MmvqPlan{tokens, rows_per_warp, CeilDiv(rows, int64_t{rows_per_warp} * kMmvqWarps),
                  CeilDiv(n_tokens, tokens)};
}

}  // namespace tokenmill::cuda
