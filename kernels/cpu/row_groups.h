// The kRowGroups16 layout of Q4_1 and Q8_0 weights (kernels/cpu/matmul.h, WeightLayout): the
// CPU's fastest kernels for them read 16 rows at once, one row per 32-bit lane.
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

// Whether RegroupRows applies: Q4_1 or Q8_0 in the kRows layout with a multiple of 16 rows.
bool CanRegroupRows(const WeightMatrix& w);

// w in the kRowGroups16 layout, stored in `storage` (resized; the result points into it).
// The same values: only their order in memory changes.
WeightMatrix RegroupRows(const WeightMatrix& w, std::vector<uint8_t>& storage);

}  // namespace tokenmill
