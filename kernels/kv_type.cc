#include "kernels/kv_type.h"

namespace tokenmill {

int64_t KvElementBytes(KvType type) {
  switch (type) {
    case KvType::kF16: return 2;
    case KvType::kF32: return 4;
    case KvType::kInt8: return 1;
  }
  return 0;
}

int64_t KvScaleBytes(KvType type) { return type == KvType::kInt8 ? sizeof(float) : 0; }

std::string_view KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF16: return "f16";
    case KvType::kF32: return "f32";
    case KvType::kInt8: return "int8";
  }
  return "?";
}

StatusOr<KvType> ParseKvType(std::string_view name) {
  for (KvType type : {KvType::kF16, KvType::kF32, KvType::kInt8}) {
    if (name == KvTypeName(type)) return type;
  }
  if (name == "fp8") {
    return InvalidArgumentError(
        "KV cache type fp8 needs --device cuda; the CPU kernels read f16, f32 or int8");
  }
  return InvalidArgumentError("unknown KV cache type \"" + std::string(name) +
                              "\": use f16, f32 or int8");
}

}  // namespace tokenmill
