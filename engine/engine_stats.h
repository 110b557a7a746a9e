// The engine's counters for metrics (Engine::Stats, EngineCore::Stats).
#pragma once

#include <cstdint>
#include <optional>

#include "cache/tiers/kv_disk_tier.h"
#include "cache/tiers/kv_host_tier.h"

namespace tokenmill {

// Counters for metrics, published after every step; the int64 ones only grow.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;  // queued in the scheduler (preempted ones included) or in the inbox
  // The LoRA adapters (GenerateRequest::lora) of the running and the waiting requests.
  std::vector<int> running_loras, waiting_loras;
  double kv_usage = 0.0;  // fraction of KV blocks in use
  int num_kv_blocks = 0;
  int num_kv_blocks_in_use = 0;
  // Of a KV limit shared with other models' engines, what this one's pools hold; unset for
  // fixed pools.
  std::optional<int64_t> kv_memory_bytes;
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;    // of those, found there
  int64_t num_preemptions = 0;
  int64_t num_prompt_tokens = 0;      // prompt tokens computed (prefix hits excluded)
  int64_t num_generation_tokens = 0;  // tokens generated
  int64_t num_finished = 0;
  int64_t num_steps = 0;  // forward passes run
  // Speculative decoding: verifications, draft tokens verified, of those accepted.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  // Self-checks run each time the engine falls idle (no request left): the scheduler's and
  // KV cache's invariants hold and every KV block is free or cached. A failure is logged.
  int64_t idle_checks = 0;
  int64_t idle_check_failures = 0;
  // The disk tier below the pool (--kv-cache-dir); none without one.
  std::optional<KvDiskTierStats> disk_tier;
  std::optional<KvHostTierStats> host_tier;
  int num_loading = 0;  // requests waiting for their prefix blocks to load from it
};

}  // namespace tokenmill
