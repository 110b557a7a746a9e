// The KV cache element types' names and what each backend reads (the enum and its sizes are
// in kernels/kv_cache_view.h, which nvcc includes too).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "kernels/kv_cache_view.h"

namespace tokenmill {

// Whether the CPU kernels read this type (all but fp8).
bool KvTypeOnCpu(KvType type);

// "f16", "f32", "int8", "fp8".
std::string_view KvTypeName(KvType type);
// The inverse of KvTypeName; InvalidArgument listing the accepted names otherwise. Callers
// that run on the CPU refuse fp8 themselves (KvTypeOnCpu), naming their flag.
StatusOr<KvType> ParseKvType(std::string_view name);

}  // namespace tokenmill
