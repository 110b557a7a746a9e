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
  int element_bits = 0;  // 16 for fp16/bf16, 32 for f32, 8 for int8, 4 for q4_0
  int scale_bytes = 0;   // per (token, KV head) row of K (and of V): 4 for int8, else 0
  // V's, where its type differs from K's (element_bits and scale_bytes are then K's); 0: as K.
  int v_element_bits = 0;
  int v_scale_bytes = 0;
  // > 0: multi-head latent attention's cache (ModelConfig::mla): one K row a layer of this
  // latent and head_dim - latent_dim roped values, no V (it is the latent).
  int latent_dim = 0;

  bool split() const { return v_element_bits > 0; }
  // K and V: layers x KV heads x (K's and V's head dim x element size + scale bytes); a
  // latent cache's K alone.
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

// A model with sliding-window layers (KV group 1, cache/kv_cache_manager.h) beside its
// full-attention ones (group 0): what one request of `tokens` tokens holds in each group.
struct KvGroupsShape {
  KvGeometry full;     // group 0's layers
  KvGeometry sliding;  // group 1's layers
  int sliding_window = 0;
};
// Blocks of a request of num_tokens tokens: group 0 all of them, group 1 at most those of its
// window (a token and the window - 1 before it, across one more block edge).
int64_t FullGroupBlocks(int64_t num_tokens, int block_size);
int64_t SlidingGroupBlocks(const KvGroupsShape& shape, int64_t num_tokens, int block_size);

struct KvGroupsPlan {
  KvCachePlan full;
  KvCachePlan sliding;
  int64_t total_bytes() const { return full.total_bytes + sliding.total_bytes; }
  std::string Describe() const;
};

// Splits budget_bytes between the two pools so that both fill up together with requests of
// design_tokens tokens (the context length): per request group 0 takes
// FullGroupBlocks(design_tokens) blocks and group 1 SlidingGroupBlocks(design_tokens), each
// block of its own layers' bytes. Group 1 gets min_sliding_blocks first (one step of a
// request alone: its window and a prefill chunk), then its share of the rest. InvalidArgument
// as PlanKvCache, or when the budget cannot hold that minimum and a block of group 0.
StatusOr<KvGroupsPlan> PlanKvCacheGroups(const KvGroupsShape& shape, int block_size,
                                         int64_t budget_bytes, int design_tokens,
                                         int min_sliding_blocks);

}  // namespace tokenmill
