#include "kernels/cpu/row_groups.h"

#include <cstring>

#include "common/check.h"

namespace tokenmill {

namespace {

// The GGUF blocks (BlockQ4_1, BlockQ8_0, BlockQ5_0) of the types that have a kRowGroups16
// layout.
#include "kernels/cpu/quant_q4_1.inc"
#include "kernels/cpu/quant_q5_0.inc"
#include "kernels/cpu/quant_q8_0.inc"

// Calls place(group_block, lane, block) for every GGUF block of every row of w, with the
// group block it goes to and the row's lane in it.
template <typename Block, typename Group, typename Place>
void RegroupBlocks(const WeightMatrix& w, Group* out, Place place) {
  const int64_t blocks = w.cols / 32;
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
          w.type == TensorType::kQ5_0) &&
         w.layout == WeightLayout::kRows && w.rows % kRowGroup == 0 && w.cols % 32 == 0;
}

WeightMatrix RegroupRows(const WeightMatrix& w, std::vector<uint8_t>& storage) {
  TM_CHECK(CanRegroupRows(w)) << "only Q4_1, Q8_0 and Q5_0 matrices of 16n rows can be regrouped";
  storage.resize(static_cast<size_t>(w.rows * w.row_bytes));
  if (w.type == TensorType::kQ4_1) {
    RegroupBlocks<BlockQ4_1>(
        w, reinterpret_cast<BlockQ4_1x16*>(storage.data()),
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
    std::memset(storage.data(), 0, storage.size());  // the masks are or'ed in bit by bit
    RegroupBlocks<BlockQ5_0>(
        w, reinterpret_cast<BlockQ5_0x16*>(storage.data()),
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
        w, reinterpret_cast<BlockQ8_0x16*>(storage.data()),
        [](BlockQ8_0x16& group, int i, const BlockQ8_0& block) {
          group.d[i] = block.d;
          for (int k = 0; k < 8; ++k) {
            for (int e = 0; e < 4; ++e) {
              group.qs[k][4 * i + e] = static_cast<uint8_t>(block.qs[4 * k + e] + 128);
            }
          }
        });
  }
  WeightMatrix regrouped = w;
  regrouped.data = storage.data();
  regrouped.layout = WeightLayout::kRowGroups16;
  return regrouped;
}

}  // namespace tokenmill
