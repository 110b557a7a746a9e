// Reference (scalar) dequantization of one run of elements to float. The fast
// kernels are tested against it; it is tested against the `gguf` Python package.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/tensor_type.h"

namespace tokenmill {

// Converts dst.size() elements stored as `type` at `src` (a whole number of blocks).
void DequantizeReference(TensorType type, const void* src, std::span<float> dst);

}  // namespace tokenmill
