#include "kernels/kv_type.h"

namespace tokenmill {

bool KvTypeOnCpu(KvType type) { return type != KvType::kFp8; }

bool KvTypeOnCuda(KvType /*type*/) { return true; }

Status CheckKvTypeOnDevice(KvType type, bool cuda, std::string_view flag) {
  if (cuda && !KvTypeOnCuda(type)) {
    return InvalidArgumentError(std::string(flag) + " " + std::string(KvTypeName(type)) +
                                " does not run on CUDA; with --device cuda use f16, f32, "
                                "int8, fp8, q4_0 or int4");
  }
  if (!cuda && !KvTypeOnCpu(type)) {
    return InvalidArgumentError(std::string(flag) + " " + std::string(KvTypeName(type)) +
                                " needs --device cuda; on the CPU use f16, f32, int8, q4_0 or "
                                "int4");
  }
  return OkStatus();
}

Status CheckKvTypeFits(KvType type, int head_dim) {
  const int64_t block = type == KvType::kQ4_0   ? kKvQ4Block
                        : type == KvType::kInt4 ? kKvInt4Group
                                                : 1;
  if (head_dim % block != 0) {
    return InvalidArgumentError(std::string(KvTypeName(type)) + " KV quantizes blocks of " +
                                std::to_string(block) + " values of a head; this model's heads "
                                "have " + std::to_string(head_dim) + ": use f16, f32 or int8");
  }
  return OkStatus();
}

std::string_view KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF16: return "f16";
    case KvType::kF32: return "f32";
    case KvType::kInt8: return "int8";
    case KvType::kFp8: return "fp8";
    case KvType::kQ4_0: return "q4_0";
    case KvType::kInt4: return "int4";
  }
  return "?";
}

StatusOr<KvType> ParseKvType(std::string_view name) {
  for (KvType type :
       {KvType::kF16, KvType::kF32, KvType::kInt8, KvType::kFp8, KvType::kQ4_0, KvType::kInt4}) {
    if (name == KvTypeName(type)) return type;
  }
  return InvalidArgumentError("unknown KV cache type \"" + std::string(name) +
                              "\": use f16, f32, int8, q4_0, int4 or fp8 (--device cuda "
                              "only)");
}

}  // namespace tokenmill
