// Reference (scalar) dequantization of one run of elements to float. The fast
// kernels are tested against it; it is tested against the `gguf` Python package.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/tensor_type.h"

namespace tokenmill {

// The 16 non-linear levels an IQ4_NL nibble indexes (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4NlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The 16 E2M1 values an MXFP4 nibble indexes, doubled (ggml's kvalues_mxfp4): x = level ·
// E8m0ToFloatHalf(e) (kernels/half.h).
inline constexpr int8_t kMxfp4Levels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// Whether DequantizeReference converts `type`.
bool HasReferenceDequantization(TensorType type);

// Converts dst.size() elements stored as `type` at `src` (a whole number of blocks).
void DequantizeReference(TensorType type, const void* src, std::span<float> dst);

}  // namespace tokenmill
