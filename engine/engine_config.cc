#include "engine/engine_config.h"

#include <string>

namespace tokenmill {

Status ValidateEngineConfig(const EngineConfig& config) {
  if (config.block_size < 1) {
    return InvalidArgumentError("the KV block size must be at least 1 token, got " +
                                std::to_string(config.block_size));
  }
  if (config.num_kv_blocks < 0) {
    return InvalidArgumentError("the KV block count must not be negative");
  }
  if (config.num_kv_blocks == 0 && config.kv_cache_bytes <= 0 && config.kv_cache_fraction <= 0) {
    return InvalidArgumentError("--kv-cache-memory must be positive");
  }
  if (config.kv_cache_fraction < 0 || config.kv_cache_fraction > 1) {
    return InvalidArgumentError("a fraction of free memory for the KV cache must be in (0, 1]");
  }
  if (config.cuda_cublas_min_tokens < 0) {
    return InvalidArgumentError("the cuBLAS token threshold must be 0 (never) or positive");
  }
  if (config.watermark_blocks < 0) {
    return InvalidArgumentError("the KV watermark must not be negative");
  }
  if (config.num_threads < 0) {
    return InvalidArgumentError("--threads must be 0 (all cores) or positive");
  }
  if (config.isa && !CpuSupports(*config.isa)) {
    return InvalidArgumentError("this CPU lacks the " + std::string(IsaName(*config.isa)) +
                                " kernels; pick another --isa or leave it unset");
  }
  TM_RETURN_IF_ERROR(ValidateSpecConfig(config.spec));
  return ValidateSchedulerConfig(config.scheduler);
}

}  // namespace tokenmill
