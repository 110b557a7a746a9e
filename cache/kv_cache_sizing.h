// How many KV blocks fit in a memory budget, and the line that says so at startup.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tokenmill {

// The per-token K/V footprint of a model.
struct KvGeometry {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int element_bytes = 0;  // 2 for fp16/bf16, 4 for f32, 1 for int8
  int scale_bytes = 0;    // per (token, KV head) row of K (and of V): 4 for int8, else 0

  // K and V: 2 x layers x KV heads x (head dim x element size + scale bytes).
  int64_t BytesPerToken() const;
};

struct KvCachePlan {
  KvGeometry geometry;
  int block_size = 0;
  int num_blocks = 0;
  int64_t bytes_per_block = 0;
  int64_t total_bytes = 0;  // num_blocks x bytes_per_block (at most the budget)

  int64_t num_token_slots() const { return int64_t{num_blocks} * block_size; }
  // One line for the startup log, e.g. "KV cache: 7281 blocks x 16 tokens = 116496 tokens in
  // 2.00 GiB (18.00 KiB/token = 2 x 30 layers x 3 KV heads x 64 head dim x 2 B)"; with
  // scales "... x (64 head dim x 1 B + 4 B scale))".
  std::string Describe() const;
};

// As many whole blocks as fit in budget_bytes. InvalidArgument when the geometry is not
// positive or the budget holds no block (the message says how much is needed).
StatusOr<KvCachePlan> PlanKvCache(const KvGeometry& geometry, int block_size, int64_t budget_bytes);

}  // namespace tokenmill
