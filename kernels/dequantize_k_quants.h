// Reference dequantization of the 256-element block types (Q2_K..Q6_K, IQ4_XS), as ggml's
// dequantize_row_* computes them: the part of DequantizeReference (dequantize.h) for these
// types, by the block.
#pragma once

#include <cstdint>

#include "kernels/tensor_type.h"

namespace tokenmill {

// The function that converts one block of `type` into 256 floats, or nullptr for a type that
// is not a 256-element block type.
using KQuantBlockFn = void (*)(const uint8_t* block, float* out);
KQuantBlockFn KQuantBlockDequantizer(TensorType type);

}  // namespace tokenmill
