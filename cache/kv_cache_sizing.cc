#include "cache/kv_cache_sizing.h"

#include <algorithm>
#include <limits>

#include "common/byte_size.h"

namespace tokenmill {

int64_t KvGeometry::BytesPerToken() const {
  const int64_t k_row = int64_t{head_dim} * element_bits / 8 + scale_bytes;
  const int64_t v_row = split() ? int64_t{head_dim} * v_element_bits / 8 + v_scale_bytes : k_row;
  return int64_t{num_layers} * num_kv_heads * (k_row + (latent_dim > 0 ? 0 : v_row));
}

namespace {

// An element's bytes: "2", "1", "0.5".
std::string ElementSize(int bits) {
  return bits % 8 == 0 ? std::to_string(bits / 8) : std::to_string(bits / 8) + ".5";
}

}  // namespace

std::string KvCachePlan::Describe() const {
  const KvGeometry& g = geometry;
  // One row's bytes: "64 head dim x 2 B", or "(64 head dim x 1 B + 4 B scale)".
  const auto row = [&](int bits, int scale_bytes) {
    std::string text = std::to_string(g.head_dim) + " head dim x " + ElementSize(bits) + " B";
    if (scale_bytes > 0) text = "(" + text + " + " + std::to_string(scale_bytes) + " B scale)";
    return text;
  };
  std::string rows = row(g.element_bits, g.scale_bytes);
  if (g.split()) rows = "(K " + rows + " + V " + row(g.v_element_bits, g.v_scale_bytes) + ")";
  if (g.latent_dim > 0) {
    return "KV cache: " + std::to_string(num_blocks) + " blocks x " + std::to_string(block_size) +
           " tokens = " + std::to_string(num_token_slots()) + " tokens in " +
           FormatBytes(total_bytes) + " (" + FormatBytes(g.BytesPerToken()) + "/token = " +
           std::to_string(g.num_layers) + " layers x (" + std::to_string(g.latent_dim) +
           " latent + " + std::to_string(g.head_dim - g.latent_dim) + " rope) x " +
           ElementSize(g.element_bits) + " B" +
           (g.scale_bytes > 0 ? " + " + std::to_string(g.scale_bytes) + " B scale" : "") +
           ": multi-head latent attention, V within K)";
  }
  return "KV cache: " + std::to_string(num_blocks) + " blocks x " + std::to_string(block_size) +
         " tokens = " + std::to_string(num_token_slots()) + " tokens in " +
         FormatBytes(total_bytes) + " (" + FormatBytes(g.BytesPerToken()) + "/token = " +
         (g.split() ? "" : "2 x ") + std::to_string(g.num_layers) + " layers x " +
         std::to_string(g.num_kv_heads) + " KV heads x " + rows + ")";
}

StatusOr<KvCachePlan> PlanKvCache(const KvGeometry& geometry, int block_size,
                                  int64_t budget_bytes) {
  if (geometry.num_layers <= 0 || geometry.num_kv_heads <= 0 || geometry.head_dim <= 0 ||
      geometry.element_bits <= 0 || geometry.element_bits % 4 != 0 || geometry.scale_bytes < 0 ||
      geometry.v_element_bits < 0 || geometry.v_element_bits % 4 != 0 ||
      geometry.v_scale_bytes < 0 || block_size <= 0) {
    return InvalidArgumentError(
        "KV cache geometry must be positive: " + std::to_string(geometry.num_layers) + " layers, " +
        std::to_string(geometry.num_kv_heads) + " KV heads, head dim " +
        std::to_string(geometry.head_dim) + ", " + std::to_string(geometry.element_bits) +
        " bits per element (a multiple of 4), block size " + std::to_string(block_size));
  }
  KvCachePlan plan;
  plan.geometry = geometry;
  plan.block_size = block_size;
  plan.bytes_per_block = geometry.BytesPerToken() * block_size;
  const int64_t num_blocks =
      std::min<int64_t>(budget_bytes / plan.bytes_per_block, std::numeric_limits<int32_t>::max());
  if (num_blocks < 1) {
    return InvalidArgumentError("a KV cache budget of " + FormatBytes(budget_bytes) +
                                " holds no block of " + std::to_string(block_size) +
                                " tokens: raise --kv-cache-memory to at least " +
                                FormatBytes(plan.bytes_per_block) + " (much more to serve)");
  }
  plan.num_blocks = static_cast<int>(num_blocks);
  plan.total_bytes = num_blocks * plan.bytes_per_block;
  return plan;
}

int64_t FullGroupBlocks(int64_t num_tokens, int block_size) {
  return (num_tokens + block_size - 1) / block_size;
}

int64_t SlidingGroupBlocks(const KvGroupsShape& shape, int64_t num_tokens, int block_size) {
  const int64_t window_blocks = (shape.sliding_window - 1 + block_size - 1) / block_size + 1;
  return std::min(FullGroupBlocks(num_tokens, block_size), window_blocks);
}

std::string KvGroupsPlan::Describe() const {
  return full.Describe() + " for full-attention layers; sliding-window layers' " +
         sliding.Describe().substr(std::string("KV cache: ").size());
}

StatusOr<KvGroupsPlan> PlanKvCacheGroups(const KvGroupsShape& shape, int block_size,
                                         int64_t budget_bytes, int design_tokens,
                                         int min_sliding_blocks) {
  if (shape.sliding_window <= 0 || design_tokens <= 0) {
    return InvalidArgumentError("a sliding window of " + std::to_string(shape.sliding_window) +
                                " tokens, requests of " + std::to_string(design_tokens) +
                                ": both must be positive");
  }
  // Block sizes (and the geometry's checks) from a one-block plan of each group.
  TM_ASSIGN_OR_RETURN(const KvCachePlan full_block, PlanKvCache(shape.full, block_size,
                                                                shape.full.BytesPerToken() *
                                                                    block_size));
  TM_ASSIGN_OR_RETURN(const KvCachePlan sliding_block,
                      PlanKvCache(shape.sliding, block_size,
                                  shape.sliding.BytesPerToken() * block_size));
  const int64_t full_bytes =
      FullGroupBlocks(design_tokens, block_size) * full_block.bytes_per_block;
  const int64_t sliding_bytes =
      SlidingGroupBlocks(shape, design_tokens, block_size) * sliding_block.bytes_per_block;
  const double sliding_share =
      static_cast<double>(sliding_bytes) / static_cast<double>(full_bytes + sliding_bytes);
  // One step's blocks first (a prefill chunk holds its window and the chunk), then the share.
  const int64_t rest = budget_bytes - int64_t{min_sliding_blocks} * sliding_block.bytes_per_block;
  const int64_t share_bytes =
      std::max<int64_t>(0, static_cast<int64_t>(static_cast<double>(rest) * sliding_share));
  const int64_t sliding_blocks = min_sliding_blocks + share_bytes / sliding_block.bytes_per_block;
  const int64_t sliding_budget = sliding_blocks * sliding_block.bytes_per_block;
  if (sliding_budget >= budget_bytes) {
    return InvalidArgumentError(
        "a KV cache budget of " + FormatBytes(budget_bytes) + " leaves nothing for the " +
        "full-attention layers after " + std::to_string(sliding_blocks) +
        " blocks of the sliding-window layers: raise --kv-cache-memory above " +
        FormatBytes(sliding_budget + full_block.bytes_per_block) + " (much more to serve)");
  }
  KvGroupsPlan plan;
  TM_ASSIGN_OR_RETURN(plan.full,
                      PlanKvCache(shape.full, block_size, budget_bytes - sliding_budget));
  TM_ASSIGN_OR_RETURN(plan.sliding, PlanKvCache(shape.sliding, block_size, sliding_budget));
  return plan;
}

}  // namespace tokenmill
