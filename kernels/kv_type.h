// The KV cache element types' names and what each backend reads (the enum and its sizes are
// in kernels/kv_cache_view.h, which nvcc includes too).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "kernels/kv_cache_view.h"

namespace tokenmill {

// Whether the CPU kernels read this type (all but fp8), and the CUDA ones (all).
bool KvTypeOnCpu(KvType type);
bool KvTypeOnCuda(KvType type);

// OK when the device reads this type, else InvalidArgument naming `flag` (e.g.
// "--kv-cache-dtype") and the types that device takes.
Status CheckKvTypeOnDevice(KvType type, bool cuda, std::string_view flag);

// InvalidArgument when rows of head_dim values cannot take this type (q4_0: blocks of 32;
// int4: groups of kKvInt4Group).
Status CheckKvTypeFits(KvType type, int head_dim);

// "f16", "f32", "int8", "fp8", "q4_0", "int4".
std::string_view KvTypeName(KvType type);
// The inverse of KvTypeName; InvalidArgument listing the accepted names otherwise. Callers
// refuse a type their device lacks themselves (CheckKvTypeOnDevice), naming their flag.
StatusOr<KvType> ParseKvType(std::string_view name);

}  // namespace tokenmill
