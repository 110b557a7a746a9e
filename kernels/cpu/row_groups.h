// The kRowGroups16 layout of Q4_1, Q8_0 and Q5_0 weights (kernels/cpu/matmul.h, WeightLayout):
// the CPU's fastest kernels for them read 16 rows at once, one row per 32-bit lane.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace tokenmill {

inline constexpr int kRowGroup = 16;

// One block (32 columns) of 16 rows: their f16 scales and minimums, then 4 × 64 bytes of
// quants in which byte 4i + e of chunk k holds element 4k + e of row i in its low nibble and
// element 16 + 4k + e in its high nibble. 320 bytes, as 16 GGUF Q4_1 blocks.
struct BlockQ4_1x16 {
  uint16_t d[kRowGroup];
  uint16_t m[kRowGroup];
  uint8_t qs[4][64];
};
static_assert(sizeof(BlockQ4_1x16) == 16 * 20);

// One block of 16 Q8_0 rows: their f16 scales, then 8 × 64 bytes in which byte 4i + e of
// chunk k holds element 4k + e of row i plus 128 (unsigned, for the u8 × s8 dot products).
// 544 bytes, as 16 GGUF Q8_0 blocks.
struct BlockQ8_0x16 {
  uint16_t d[kRowGroup];
  uint8_t qs[8][64];
};
static_assert(sizeof(BlockQ8_0x16) == 16 * 34);

// One block of 16 Q5_0 rows, 352 bytes as 16 GGUF Q5_0 blocks: their f16 scales, their low
// nibbles placed as BlockQ4_1x16's (chunk k < 4: elements 4k..4k+3 in the low nibbles of
// qs[k], chunk k + 4: elements 16 + 4k.. in its high nibbles), then per chunk k the fifth bits
// as a 64-bit mask, bit 4i + e for element e of row i's chunk k (an AVX-512 byte mask). Chunk k
// is ggml's lane k (elements 4k..4k+3), so its kernels keep ggml's 8 lanes per row.
struct BlockQ5_0x16 {
  uint16_t d[kRowGroup];
  uint8_t qs[4][64];
  uint64_t qh[8];
};
static_assert(sizeof(BlockQ5_0x16) == 16 * 22);

// Whether RegroupRows applies: Q4_1, Q8_0 or Q5_0 in the kRows layout with a multiple of 16
// rows.
bool CanRegroupRows(const WeightMatrix& w);

// w in the kRowGroups16 layout, stored in `storage` (resized; the result points into it).
// The same values: only their order in memory changes.
WeightMatrix RegroupRows(const WeightMatrix& w, std::vector<uint8_t>& storage);

}  // namespace tokenmill
