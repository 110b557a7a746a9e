// The arithmetic of the decode GEMV over quantized weights (llama.cpp's MMVQ style, gemv.cu),
// written once for the device and the host: the device layout of Q4_0 / Q4_1 / Q8_0 weights
// (quants in 16-byte words), the q8_1 activations (as the CPU's QuantizeActivations), the
// launch plan, and MmvqDot, the host emulation of one (row, token) result bit for bit
// (tests/kernels/cuda: against the CPU kernels here, against the GPU kernel on a GPU).
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/mmvq_kquant_math.h"

namespace tokenmill::cuda {

// ---- packed weight rows --------------------------------------------------------------------

// A packed row of `blocks` blocks: the blocks' quants back to back (16 bytes a block for
// Q4_0 / Q4_1 as in GGUF, 32 for Q8_0), then their f16 scales (d, or d and m for Q4_1), padded
// to 16 bytes so every row's quants start 16-byte aligned. A 16-byte word holds one Q4 block
// or half a Q8_0 block.
constexpr int kWordBytes = 16;

TM_HOST_DEVICE constexpr int PackedQuantBytes(uint32_t type) { return type == kWQ8_0 ? 32 : 16; }
TM_HOST_DEVICE constexpr int PackedScaleBytes(uint32_t type) { return type == kWQ4_1 ? 4 : 2; }
TM_HOST_DEVICE constexpr int64_t PackedRowBytes(uint32_t type, int64_t cols) {
  const int64_t blocks = cols / kQuantBlock;
  return CeilDiv(blocks * (PackedQuantBytes(type) + PackedScaleBytes(type)), kWordBytes) *
         kWordBytes;
}
// 16-byte words of quants in a row, and the elements one word holds.
TM_HOST_DEVICE constexpr int64_t PackedWords(uint32_t type, int64_t cols) {
  return cols / kQuantBlock * PackedQuantBytes(type) / kWordBytes;
}
TM_HOST_DEVICE constexpr int WordElements(uint32_t type) { return type == kWQ8_0 ? 16 : 32; }

// One GGUF row (cols / 32 blocks of UnitBytes(type)) into its packed form (PackedRowBytes).
TM_HOST_DEVICE inline void PackRow(uint32_t type, const uint8_t* gguf, int64_t cols,
                                   uint8_t* packed) {
  const int64_t blocks = cols / kQuantBlock;
  const int qb = PackedQuantBytes(type), sb = PackedScaleBytes(type);
  uint8_t* scales = packed + blocks * qb;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* in = gguf + b * UnitBytes(type);
    for (int i = 0; i < sb; ++i) scales[b * sb + i] = in[i];
    for (int i = 0; i < qb; ++i) packed[b * qb + i] = in[sb + i];
  }
  for (int64_t i = blocks * (qb + sb); i < PackedRowBytes(type, cols); ++i) packed[i] = 0;
}

// Element i of a packed row, as DequantElement of the GGUF row.
TM_HOST_DEVICE inline float PackedElement(uint32_t type, const uint8_t* row, int64_t cols,
                                          int64_t i) {
  const int64_t b = i / kQuantBlock;
  const int j = static_cast<int>(i % kQuantBlock);
  const uint8_t* qs = row + b * PackedQuantBytes(type);
  const uint8_t* s = row + cols / kQuantBlock * PackedQuantBytes(type) + b * PackedScaleBytes(type);
  const float d = HalfBitsToFloat(LoadU16(s));
  if (type == kWQ4_0) return DequantQ4_0(qs, j, d);
  if (type == kWQ4_1) return DequantQ4_1(qs, j, d, HalfBitsToFloat(LoadU16(s + 2)));
  return DequantQ8_0(qs, j, d);
}

// Element i of a device weight row (weight_upload.h): packed for the quantized types.
TM_HOST_DEVICE inline float DeviceElement(uint32_t type, const uint8_t* row, int64_t cols,
                                          int64_t i) {
  if (IsKQuant(type)) return KPackedElement(type, row, cols, i);
  return IsQuantized(type) ? PackedElement(type, row, cols, i) : DequantElement(type, row, i);
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
// the word's elements, exact; Q4_0's quants minus 8), and for Q4_1 then acc = fma(m_w,
// d_a · Σq_a, acc). The 32 lane sums meet in WarpSum's butterfly (offsets 16, 8, 4, 2, 1).
constexpr int kMmvqLanes = 32;

// Word w's contribution to a lane's accumulator (both the emulation and the kernel use it
// after computing `sumi` their own way: integer sums are exact whatever the order).
TM_HOST_DEVICE inline float MmvqStep(uint32_t type, float acc, int32_t sumi, float d_w, float m_w,
                                     const float* ds) {
  acc = MulAdd(d_w * ds[0], static_cast<float>(sumi), acc);
  return type == kWQ4_1 ? MulAdd(m_w, ds[1], acc) : acc;
}

// The scales (d, m) of the block holding word w of a packed row.
TM_HOST_DEVICE inline void WordScales(uint32_t type, const uint8_t* row, int64_t cols, int64_t w,
                                      float* d, float* m) {
  const int64_t b = w * WordElements(type) / kQuantBlock;
  const uint8_t* s = row + cols / kQuantBlock * PackedQuantBytes(type) + b * PackedScaleBytes(type);
  *d = HalfBitsToFloat(LoadU16(s));
  *m = type == kWQ4_1 ? HalfBitsToFloat(LoadU16(s + 2)) : 0.0f;
}

// Quant k (< WordElements) of word w of a packed row, as the integer the kernel multiplies.
TM_HOST_DEVICE inline int WordQuant(uint32_t type, const uint8_t* row, int64_t w, int k) {
  const uint8_t* word = row + w * kWordBytes;
  if (type == kWQ8_0) return static_cast<int8_t>(word[k]);
  const int q = k < 16 ? (word[k] & 0x0f) : (word[k - 16] >> 4);
  return type == kWQ4_0 ? q - 8 : q;
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
      for (int k = 0; k < WordElements(type); ++k) sumi += WordQuant(type, row, w, k) * qa[first + k];
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
