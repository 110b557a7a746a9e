#include "kernels/cpu/row_groups.h"

#include <cstring>

#include "common/check.h"
#include "kernels/cpu/quant_blocks.h"

namespace tokenmill {

namespace {

void RegroupQ4_1(const WeightMatrix& w, BlockQ4_1x16* out) {
  const int64_t blocks = w.cols / 32;
  for (int64_t g = 0; g < w.rows / kRowGroup; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      BlockQ4_1x16& group = out[g * blocks + b];
      for (int i = 0; i < kRowGroup; ++i) {
        internal::BlockQ4_1 block;
        std::memcpy(&block, w.data + (g * kRowGroup + i) * w.row_bytes + b * 20, sizeof(block));
        group.d[i] = block.d;
        group.m[i] = block.m;
        // Element j < 16 is qs[j]'s low nibble, 16 + j its high nibble, both in GGUF and
        // here; only the bytes move: qs[4k + e] to chunk k, lane i, byte e.
        for (int k = 0; k < 4; ++k) {
          for (int e = 0; e < 4; ++e) group.qs[k][4 * i + e] = block.qs[4 * k + e];
        }
      }
    }
  }
}

void RegroupQ8_0(const WeightMatrix& w, BlockQ8_0x16* out) {
  const int64_t blocks = w.cols / 32;
  for (int64_t g = 0; g < w.rows / kRowGroup; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      BlockQ8_0x16& group = out[g * blocks + b];
      for (int i = 0; i < kRowGroup; ++i) {
        internal::BlockQ8_0 block;
        std::memcpy(&block, w.data + (g * kRowGroup + i) * w.row_bytes + b * 34, sizeof(block));
        group.d[i] = block.d;
        for (int k = 0; k < 8; ++k) {
          for (int e = 0; e < 4; ++e) {
            group.qs[k][4 * i + e] = static_cast<uint8_t>(block.qs[4 * k + e] + 128);
          }
        }
      }
    }
  }
}

}  // namespace

bool CanRegroupRows(const WeightMatrix& w) {
  return (w.type == TensorType::kQ4_1 || w.type == TensorType::kQ8_0) &&
         w.layout == WeightLayout::kRows && w.rows % kRowGroup == 0 && w.cols % 32 == 0;
}

WeightMatrix RegroupRows(const WeightMatrix& w, std::vector<uint8_t>& storage) {
  TM_CHECK(CanRegroupRows(w)) << "only Q4_1 and Q8_0 matrices of 16n rows can be regrouped";
  storage.resize(static_cast<size_t>(w.rows * w.row_bytes));
  if (w.type == TensorType::kQ4_1) {
    RegroupQ4_1(w, reinterpret_cast<BlockQ4_1x16*>(storage.data()));
  } else {
    RegroupQ8_0(w, reinterpret_cast<BlockQ8_0x16*>(storage.data()));
  }
  WeightMatrix regrouped = w;
  regrouped.data = storage.data();
  regrouped.layout = WeightLayout::kRowGroups16;
  return regrouped;
}

}  // namespace tokenmill
