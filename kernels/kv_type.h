// The element types of the KV cache, shared by the CPU and CUDA backends and the sizing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tokenmill {

// kInt8: symmetric int8 with one float scale per (token, KV head) for K and one for V
// (scale = max|x| / 127, x ≈ q · scale), the scales in their own arrays beside K and V.
// kFp8: FP8 E4M3 (OCP "e4m3fn": no infinities, max 448) in the same layout, with
// scale = max|x| / 448 (kernels/cuda/kernel_math.h); the CUDA backend only.
enum class KvType { kF16, kF32, kInt8, kFp8 };

// Bytes of one K (or V) element.
int64_t KvElementBytes(KvType type);
// Bytes of the scales of one (token, KV head) row of K (or of V): 4 for int8 and fp8, else 0.
int64_t KvScaleBytes(KvType type);

// Whether the CPU kernels read this type (all but fp8).
bool KvTypeOnCpu(KvType type);

// "f16", "f32", "int8", "fp8".
std::string_view KvTypeName(KvType type);
// The inverse of KvTypeName; InvalidArgument listing the accepted names otherwise. Callers
// that run on the CPU refuse fp8 themselves (KvTypeOnCpu), naming their flag.
StatusOr<KvType> ParseKvType(std::string_view name);

}  // namespace tokenmill
