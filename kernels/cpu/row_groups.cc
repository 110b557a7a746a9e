#include "kernels/cpu/row_groups.h"

#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/half.h"

namespace tokenmill {

namespace {

// The GGUF blocks (BlockQ4_1, BlockQ8_0, BlockQ5_0, BlockQ4_K) of the types that have a
// kRowGroups16 layout.
#include "kernels/cpu/quant_k_common.inc"
#include "kernels/cpu/quant_q4_1.inc"
#include "kernels/cpu/quant_q4_k.inc"
#include "kernels/cpu/quant_q5_k.inc"
#include "kernels/cpu/quant_q6_k.inc"
#include "kernels/cpu/quant_q5_0.inc"
#include "kernels/cpu/quant_q8_0.inc"

bool IsKQuant(TensorType type) {
  return type == TensorType::kQ4_K || type == TensorType::kQ5_K || type == TensorType::kQ6_K;
}

// Columns a block of `type` covers.
int64_t BlockCols(TensorType type) { return IsKQuant(type) ? kQ8KBlock : 32; }

// Row i's Q6_K block into / out of its group: the byte moves BlockQ6_Kx16 documents.
void PlaceQ6_K(BlockQ6_Kx16& group, int i, const BlockQ6_K& block) {
  group.d[i] = block.d;
  for (int s = 0; s < 16; ++s) group.scales[s][i] = block.scales[s];
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 8; ++k) {
      for (int e = 0; e < 4; ++e) {
        group.low[h][k][4 * i + e] = block.ql[64 * h + 4 * k + e];
        group.low[h][k + 8][4 * i + e] = block.ql[64 * h + 32 + 4 * k + e];
        group.high[h][k][4 * i + e] = block.qh[32 * h + 4 * k + e];
      }
    }
  }
}
void TakeQ6_K(const BlockQ6_Kx16& group, int i, BlockQ6_K& block) {
  block.d = group.d[i];
  for (int s = 0; s < 16; ++s) block.scales[s] = group.scales[s][i];
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 8; ++k) {
      for (int e = 0; e < 4; ++e) {
        block.ql[64 * h + 4 * k + e] = group.low[h][k][4 * i + e];
        block.ql[64 * h + 32 + 4 * k + e] = group.low[h][k + 8][4 * i + e];
        block.qh[32 * h + 4 * k + e] = group.high[h][k][4 * i + e];
      }
    }
  }
}

// Row i's Q4_K or Q5_K block into its group (scales and minimums unpacked as ggml's utmp
// shuffle does; Q5_K's fifth bits beside the quants).
template <typename Group, typename Block>
void PlaceKWithMins(Group& group, int i, const Block& block) {
  group.d[i] = block.d;
  group.dmin[i] = block.dmin;
  uint8_t scales_mins[16];
  UnpackScalesMinsK4(block.scales, scales_mins);
  for (int c = 0; c < 8; ++c) {
    group.scales[c][i] = scales_mins[c];
    group.mins[c][i] = scales_mins[8 + c];
  }
  for (int k = 0; k < 8; ++k) {
    for (int e = 0; e < 4; ++e) {
      for (int j = 0; j < 4; ++j) group.qs[j][k][4 * i + e] = block.qs[32 * j + 4 * k + e];
      if constexpr (requires { block.qh; }) group.qh[k][4 * i + e] = block.qh[4 * k + e];
    }
  }
}

// And out of it (ggml's 6-bit packing of the scales and minimums: get_scale_min_k4 read
// backwards: scales and minimums 0..3 in the low 6 bits of bytes 0..7, the high 2 bits of 4..7
// above them, their low 4 in bytes 8..11).
template <typename Group, typename Block>
void TakeKWithMins(const Group& g, int i, Block& block) {
  block.d = g.d[i];
  block.dmin = g.dmin[i];
  for (int j = 0; j < 4; ++j) {
    const uint8_t sc_hi = g.scales[j + 4][i], m_hi = g.mins[j + 4][i];
    block.scales[j] = static_cast<uint8_t>(g.scales[j][i] | ((sc_hi >> 4) << 6));
    block.scales[j + 4] = static_cast<uint8_t>(g.mins[j][i] | ((m_hi >> 4) << 6));
    block.scales[j + 8] = static_cast<uint8_t>((sc_hi & 0x0f) | ((m_hi & 0x0f) << 4));
  }
  for (int k = 0; k < 8; ++k) {
    for (int e = 0; e < 4; ++e) {
      for (int j = 0; j < 4; ++j) block.qs[32 * j + 4 * k + e] = g.qs[j][k][4 * i + e];
      if constexpr (requires { block.qh; }) block.qh[4 * k + e] = g.qh[k][4 * i + e];
    }
  }
}

// Rows of `group` of w (kRowGroups16, Groups of GGUF Blocks) back in the GGUF layout.
template <typename Block, typename Group, typename Take>
void UngroupBlocks(const WeightMatrix& w, int64_t group, uint8_t* out, Take take) {
  const int64_t blocks = w.cols / kQ8KBlock;
  const auto* groups = reinterpret_cast<const Group*>(w.data) + group * blocks;
  for (int i = 0; i < kRowGroup; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      Block block;
      take(groups[b], i, block);
      std::memcpy(out + i * w.row_bytes + b * static_cast<int64_t>(sizeof(Block)), &block,
                  sizeof(block));
    }
  }
}

// Calls place(group_block, lane, block) for every GGUF block of every row of w, with the
// group block it goes to and the row's lane in it.
template <typename Block, typename Group, typename Place>
void RegroupBlocks(const WeightMatrix& w, Group* out, Place place) {
  const int64_t blocks = w.cols / BlockCols(w.type);
  for (int64_t g = 0; g < w.rows / kRowGroup; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int i = 0; i < kRowGroup; ++i) {
        Block block;
        std::memcpy(&block, w.data + (g * kRowGroup + i) * w.row_bytes + b * sizeof(Block),
                    sizeof(Block));
        place(out[g * blocks + b], i, block);
      }
    }
  }
}

}  // namespace

bool CanRegroupRows(const WeightMatrix& w) {
  return (w.type == TensorType::kQ4_1 || w.type == TensorType::kQ8_0 ||
          w.type == TensorType::kQ5_0 || IsKQuant(w.type)) &&
         w.layout == WeightLayout::kRows && w.rows % kRowGroup == 0 &&
         w.cols % BlockCols(w.type) == 0;
}

bool RowGroupsPay(TensorType type, CpuIsa isa) {
  return !IsKQuant(type) || isa == CpuIsa::kAvx512Vnni;
}

int64_t RegroupedBytes(const WeightMatrix& w) {
  const int64_t groups = w.rows / kRowGroup * (w.cols / kQ8KBlock);
  switch (w.type) {
    case TensorType::kQ4_K: return groups * static_cast<int64_t>(sizeof(BlockQ4_Kx16));
    case TensorType::kQ5_K: return groups * static_cast<int64_t>(sizeof(BlockQ5_Kx16));
    default: return w.rows * w.row_bytes;  // the same bytes, moved
  }
}

void RegroupRowsInto(const WeightMatrix& w, uint8_t* out) {
  TM_CHECK(CanRegroupRows(w))
      << "only Q4_1, Q8_0, Q5_0, Q4_K, Q5_K and Q6_K matrices of 16n rows can be regrouped";
  if (w.type == TensorType::kQ4_K) {
    RegroupBlocks<BlockQ4_K>(w, reinterpret_cast<BlockQ4_Kx16*>(out),
                             PlaceKWithMins<BlockQ4_Kx16, BlockQ4_K>);
  } else if (w.type == TensorType::kQ5_K) {
    RegroupBlocks<BlockQ5_K>(w, reinterpret_cast<BlockQ5_Kx16*>(out),
                             PlaceKWithMins<BlockQ5_Kx16, BlockQ5_K>);
  } else if (w.type == TensorType::kQ6_K) {
    RegroupBlocks<BlockQ6_K>(w, reinterpret_cast<BlockQ6_Kx16*>(out), PlaceQ6_K);
  } else if (w.type == TensorType::kQ4_1) {
    RegroupBlocks<BlockQ4_1>(
        w, reinterpret_cast<BlockQ4_1x16*>(out),
        [](BlockQ4_1x16& group, int i, const BlockQ4_1& block) {
          group.d[i] = block.d;
          group.m[i] = block.m;
          // Element j < 16 is qs[j]'s low nibble, 16 + j its high nibble, both in GGUF and
          // here; only the bytes move: qs[4k + e] to chunk k, lane i, byte e.
          for (int k = 0; k < 4; ++k) {
            for (int e = 0; e < 4; ++e) group.qs[k][4 * i + e] = block.qs[4 * k + e];
          }
        });
  } else if (w.type == TensorType::kQ5_0) {
    // The masks are or'ed in bit by bit.
    std::memset(out, 0, static_cast<size_t>(RegroupedBytes(w)));
    RegroupBlocks<BlockQ5_0>(
        w, reinterpret_cast<BlockQ5_0x16*>(out),
        [](BlockQ5_0x16& group, int i, const BlockQ5_0& block) {
          group.d[i] = block.d;
          uint32_t fifth;
          std::memcpy(&fifth, block.qh, sizeof(fifth));  // bit j: element j (little-endian)
          for (int k = 0; k < 4; ++k) {
            for (int e = 0; e < 4; ++e) {
              group.qs[k][4 * i + e] = block.qs[4 * k + e];
              group.qh[k] |= uint64_t{(fifth >> (4 * k + e)) & 1} << (4 * i + e);
              group.qh[k + 4] |= uint64_t{(fifth >> (16 + 4 * k + e)) & 1} << (4 * i + e);
            }
          }
        });
  } else {
    RegroupBlocks<BlockQ8_0>(
        w, reinterpret_cast<BlockQ8_0x16*>(out),
        [](BlockQ8_0x16& group, int i, const BlockQ8_0& block) {
          group.d[i] = block.d;
          for (int k = 0; k < 8; ++k) {
            for (int e = 0; e < 4; ++e) {
              group.qs[k][4 * i + e] = static_cast<uint8_t>(block.qs[4 * k + e] + 128);
            }
          }
        });
  }
}

WeightMatrix RegroupRows(const WeightMatrix& w, std::vector<uint8_t>& storage) {
  storage.resize(static_cast<size_t>(RegroupedBytes(w)));
  RegroupRowsInto(w, storage.data());
  WeightMatrix regrouped = w;
  regrouped.data = storage.data();
  regrouped.layout = WeightLayout::kRowGroups16;
  return regrouped;
}

void UngroupRows(const WeightMatrix& w, int64_t group, uint8_t* out) {
  TM_CHECK(IsKQuant(w.type) && w.layout == WeightLayout::kRowGroups16)
      << "UngroupRows reads regrouped K-quant matrices";
  if (w.type == TensorType::kQ4_K) {
    UngroupBlocks<BlockQ4_K, BlockQ4_Kx16>(w, group, out, TakeKWithMins<BlockQ4_Kx16, BlockQ4_K>);
  } else if (w.type == TensorType::kQ5_K) {
    UngroupBlocks<BlockQ5_K, BlockQ5_Kx16>(w, group, out, TakeKWithMins<BlockQ5_Kx16, BlockQ5_K>);
  } else {
    UngroupBlocks<BlockQ6_K, BlockQ6_Kx16>(w, group, out, TakeQ6_K);
  }
}

}  // namespace tokenmill
