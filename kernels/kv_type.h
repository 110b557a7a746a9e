// The element types of the KV cache, shared by the CPU and CUDA backends and the sizing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tokenmill {

// kInt8: symmetric int8 with one float scale per (token, KV head) for K and one for V
// (scale = max|x| / 127, x ≈ q · scale), the scales in their own arrays beside K and V.
enum class KvType { kF16, kF32, kInt8 };

// Bytes of one K (or V) element.
int64_t KvElementBytes(KvType type);
// Bytes of the scales of one (token, KV head) row of K (or of V): 4 for int8, else 0.
int64_t KvScaleBytes(KvType type);

// "f16", "f32", "int8".
std::string_view KvTypeName(KvType type);
// The inverse of KvTypeName; InvalidArgument listing the accepted names otherwise.
StatusOr<KvType> ParseKvType(std::string_view name);

}  // namespace tokenmill
