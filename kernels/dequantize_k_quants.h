// Reference dequantization of the 256-element block types (Q2_K..Q6_K, IQ4_XS), as ggml's
// dequantize_row_* computes them: the part of DequantizeReference (dequantize.h) for these
// types, by the block.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor_type.h"

namespace tokenmill {

// The function that converts one block of `type` into 256 floats, or nullptr for a type that
// is not a 256-element block type.
using KQuantBlockFn = void (*)(const uint8_t* block, float* out);
KQuantBlockFn KQuantBlockDequantizer(TensorType type);

// Byte offsets of the f16 fields (d, and dmin where the type has one) in a block of `type`, or
// nothing for a type that is not a 256-element block type: what tests and benchmarks need to
// fill blocks with random bytes and still have finite scales.
std::vector<int> KQuantF16Offsets(TensorType type);

}  // namespace tokenmill
