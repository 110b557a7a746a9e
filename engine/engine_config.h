// How an engine is built: scheduler limits, the KV pool and the backend (CPU or CUDA).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/kv_events.h"
#include "cache/kv_memory_budget.h"
#include "common/status.h"
#include "engine/speculative/spec_config.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention.h"
#include "scheduler/scheduler_config.h"

namespace tokenmill {
class LoraAdapter;  // model/lora.h
}  // namespace tokenmill

namespace tokenmill {

// Where the forward pass runs and the KV pool lives.
enum class Device { kCpu, kCuda };

// What --kv-cache-host-size, --kv-cache-dir, --kv-cache-dir-size and --kv-cache-dir-ttl set
// (EngineConfig::kv_tiers).
struct KvTierSettings {
  int64_t host_bytes = 0;  // 0: no host tier
  std::string dir;         // empty: no disk tier
  int64_t max_bytes = int64_t{10} << 30;
  std::chrono::seconds ttl{0};
  std::string model_path;  // the model's identity is its tensor data's digest (KvTierIdentity)
};

struct EngineConfig {
  // Token budget, max sequences, context length (capped at the model's), queue length.
  // eos_token_ids is filled from the tokenizer's end-of-generation ids.
  SchedulerConfig scheduler;
  // KV pool: block size (tokens), memory (--kv-cache-memory), or a block count for tests.
  int block_size = 16;
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int num_kv_blocks = 0;  // > 0: exactly this many blocks, kv_cache_bytes ignored
  // Set: the pools are sized for the whole of this limit (kv_cache_bytes, its total) and grow
  // and shrink within it, shared with other engines: the models of one server
  // (engine/elastic_kv.h). The CPU only.
  std::shared_ptr<KvMemoryBudget> kv_memory_budget;
  KvType kv_type = KvType::kF16;  // K's, and V's unless kv_type_v is set
  // V's type where it differs from K's (--kv-cache-dtype-v; keys are the sensitive half).
  std::optional<KvType> kv_type_v;
  KvType v_type() const { return kv_type_v.value_or(kv_type); }
  bool enable_prefix_caching = true;
  // Blocks an admission must leave free so running requests can grow.
  int watermark_blocks = 1;
  // Sliding-window layers in a KV group of their own that keeps only their window
  // (docs/design.md, "KV groups"); false: every layer keeps every block in one pool, as
  // vLLM's --disable-hybrid-kv-cache-manager.
  bool sliding_window_kv_group = true;
  Device device = Device::kCpu;
  // CUDA: > 0 sizes the KV pool as this fraction of the GPU's free memory once the weights are
  // loaded (instead of kv_cache_bytes).
  double kv_cache_fraction = 0.0;
  // CUDA: steps of at least this many tokens use cuBLAS (0: never; every product by the GEMV
  // kernel keeps greedy tokens bit-identical whatever is batched).
  int cuda_cublas_min_tokens = 0;
  // CPU threads of the forward pass (the engine thread is one of them); 0: all cores.
  int num_threads = 0;
  // Kernels: the best this CPU has unless set.
  std::optional<CpuIsa> isa;
  // Speculative decoding (--spec, --spec-tokens); kDraft needs a draft model at Create.
  SpecConfig spec;
  // Set: called on the engine thread after each step that changed the prefix cache, with
  // that step's events in order (cache/kv_events.h), and with AllBlocksCleared once the engine
  // has stopped; it must not block.
  std::function<void(std::vector<KvCacheEvent>)> kv_event_handler;
  // The host and disk tiers below the pool (engine/kv_tiering.h): off without a size or a
  // directory.
  KvTierSettings kv_tiers;
  // The LoRA adapters requests may name at start, by id (GenerateRequest::lora; more come
  // with Engine::AddLora), over the model the engine runs.
  std::map<int, std::shared_ptr<const LoraAdapter>> lora_adapters;
};

// InvalidArgument naming the setting when a value cannot work.
Status ValidateEngineConfig(const EngineConfig& config);

}  // namespace tokenmill
