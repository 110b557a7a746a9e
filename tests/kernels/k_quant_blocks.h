// Where the f16 scales of each 256-element block type's block lie, so tests can fill blocks
// with random bytes (every quant and packed sub-block scale) and still have finite scales.
#pragma once

#include <vector>

#include "kernels/tensor_type.h"

namespace tokenmill {

inline std::vector<int> KQuantF16Offsets(TensorType type) {
  switch (type) {
    case TensorType::kQ2_K: return {80, 82};
    case TensorType::kQ3_K: return {108};
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: return {0, 2};
    case TensorType::kQ6_K: return {208};
    case TensorType::kIQ4_XS: return {0};
    default: return {};
  }
}

}  // namespace tokenmill
