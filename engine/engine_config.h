// How an engine is built: scheduler limits, the KV pool and the CPU backend.
#pragma once

#include <cstdint>
#include <optional>

#include "common/status.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention.h"
#include "scheduler/scheduler_config.h"

namespace tokenmill {

struct EngineConfig {
  // Token budget, max sequences, context length (capped at the model's), queue length.
  // eos_token_ids is filled from the tokenizer's end-of-generation ids.
  SchedulerConfig scheduler;
  // KV pool: block size (tokens), memory (--kv-cache-memory), or a block count for tests.
  int block_size = 16;
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int num_kv_blocks = 0;  // > 0: exactly this many blocks, kv_cache_bytes ignored
  KvType kv_type = KvType::kF16;
  bool enable_prefix_caching = true;
  // Blocks an admission must leave free so running requests can grow.
  int watermark_blocks = 1;
  // CPU threads of the forward pass (the engine thread is one of them); 0: all cores.
  int num_threads = 0;
  // Kernels: the best this CPU has unless set.
  std::optional<CpuIsa> isa;
};

// InvalidArgument naming the setting when a value cannot work.
Status ValidateEngineConfig(const EngineConfig& config);

}  // namespace tokenmill
