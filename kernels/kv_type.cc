#include "kernels/kv_type.h"

namespace tokenmill {

bool KvTypeOnCpu(KvType type) { return type != KvType::kFp8; }

std::string_view KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF16: return "f16";
    case KvType::kF32: return "f32";
    case KvType::kInt8: return "int8";
    case KvType::kFp8: return "fp8";
  }
  return "?";
}

StatusOr<KvType> ParseKvType(std::string_view name) {
  for (KvType type : {KvType::kF16, KvType::kF32, KvType::kInt8, KvType::kFp8}) {
    if (name == KvTypeName(type)) return type;
  }
  return InvalidArgumentError("unknown KV cache type \"" + std::string(name) +
                              "\": use f16, f32, int8 or fp8 (fp8 with --device cuda only)");
}

}  // namespace tokenmill
