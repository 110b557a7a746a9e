// The kRowGroups16 layout of Q4_1, Q8_0, Q5_0, Q4_K, Q5_K and Q6_K weights (kernels/cpu/matmul.h,
// WeightLayout): the CPU's fastest kernels for them read 16 rows at once, one row per 32-bit lane.
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

// One block (256 columns) of 16 Q4_K rows: their f16 scales d and dmin; their sub-block scales
// and minimums unpacked from 6 bits to bytes, sub-block c's of row i at [c][i]; then the quants:
// chunk [j][k] holds in byte 4i + e row i's GGUF byte qs[32j + 4k + e] (element 64j + 4k + e in
// its low nibble, 64j + 32 + 4k + e in its high nibble): a 32-element sub-block is 8 chunks,
// each 4 elements of 16 rows (matmul_row_groups_k.inc). 2368 bytes: 2.8% more than 16
// GGUF Q4_K blocks.
struct BlockQ4_Kx16 {
  uint16_t d[kRowGroup];
  uint16_t dmin[kRowGroup];
  uint8_t scales[8][kRowGroup];
  uint8_t mins[8][kRowGroup];
  uint8_t qs[4][8][64];
};
static_assert(sizeof(BlockQ4_Kx16) == 16 * 148);

// One block (256 columns) of 16 Q5_K rows: BlockQ4_Kx16 for the low 4 bits, then the fifth
// bits: qh[k] holds in byte 4i + e row i's GGUF byte qh[4k + e], whose bit c is the fifth bit of
// element 32c + 4k + e. 2880 bytes: 2.3% more than 16 GGUF Q5_K blocks.
struct BlockQ5_Kx16 : BlockQ4_Kx16 {
  uint8_t qh[8][64];
};
static_assert(sizeof(BlockQ5_Kx16) == 16 * 180);

// One block (256 columns) of 16 Q6_K rows, 3360 bytes as 16 GGUF Q6_K blocks: their f16 scales
// d; their int8 sub-block scales, sub-block s's of row i at [s][i]; then per half h of the block
// (elements 128h..) and ggml lane k, row i's GGUF bytes 4k + e (byte 4i + e of each chunk) of
// ql[64h..] (low[h][k]: elements 128h + 4k + e and, high nibbles, 128h + 64 + 4k + e), of
// ql[64h + 32..] (low[h][k + 8]: elements 128h + 32 + 4k + e and 128h + 96 + 4k + e) and of
// qh[32h..] (high[h][k]: the top 2 bits of those four elements, in bits 0-1, 2-3, 4-5, 6-7:
// 128h + 4k + e, + 32, + 64, + 96).
struct BlockQ6_Kx16 {
  uint16_t d[kRowGroup];
  int8_t scales[16][kRowGroup];
  uint8_t low[2][16][64];
  uint8_t high[2][8][64];
};
static_assert(sizeof(BlockQ6_Kx16) == 16 * 210);

// Whether RegroupRows applies: Q4_1, Q8_0, Q5_0, Q4_K, Q5_K or Q6_K in the kRows layout with
// a multiple of 16 rows.
bool CanRegroupRows(const WeightMatrix& w);

// Whether `isa` runs the row groups of `type` faster than its file layout: the K-quants' need
// AVX-512 VNNI (the other tables run the same order in plain loops, correct but slower).
bool RowGroupsPay(TensorType type, CpuIsa isa);

// w in the kRowGroups16 layout, stored in `storage` (resized; the result points into it).
// The same values: only their order in memory changes.
WeightMatrix RegroupRows(const WeightMatrix& w, std::vector<uint8_t>& storage);

// The bytes RegroupRows stores, and the same regrouping written to `out` (that many bytes).
// Groups follow one another in row order, so rows [16n, 16m) of w regrouped alone are bytes
// [n, m) · RegroupedBytes(16 rows) of the whole: a loader can regroup a matrix in slices.
int64_t RegroupedBytes(const WeightMatrix& w);
void RegroupRowsInto(const WeightMatrix& w, uint8_t* out);

// Rows [16 group, 16 group + 16) of a kRowGroups16 K-quant matrix back in the GGUF layout:
// 16 × w.row_bytes bytes at `out`, as they were before RegroupRows.
void UngroupRows(const WeightMatrix& w, int64_t group, uint8_t* out);

}  // namespace tokenmill
