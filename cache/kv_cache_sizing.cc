#include "cache/kv_cache_sizing.h"

#include <algorithm>
#include <limits>

#include "common/byte_size.h"

namespace tokenmill {

int64_t KvGeometry::BytesPerToken() const {
  return int64_t{2} * num_layers * num_kv_heads *
         (int64_t{head_dim} * element_bytes + scale_bytes);
}

std::string KvCachePlan::Describe() const {
  const KvGeometry& g = geometry;
  return "KV cache: " + std::to_string(num_blocks) + " blocks x " + std::to_string(block_size) +
         " tokens = " + std::to_string(num_token_slots()) + " tokens in " +
         FormatBytes(total_bytes) + " (" + FormatBytes(g.BytesPerToken()) + "/token = 2 x " +
         std::to_string(g.num_layers) + " layers x " + std::to_string(g.num_kv_heads) +
         " KV heads x " + (g.scale_bytes > 0 ? "(" : "") + std::to_string(g.head_dim) +
         " head dim x " + std::to_string(g.element_bytes) + " B" +
         (g.scale_bytes > 0 ? " + " + std::to_string(g.scale_bytes) + " B scale)" : "") + ")";
}

StatusOr<KvCachePlan> PlanKvCache(const KvGeometry& geometry, int block_size,
                                  int64_t budget_bytes) {
  if (geometry.num_layers <= 0 || geometry.num_kv_heads <= 0 || geometry.head_dim <= 0 ||
      geometry.element_bytes <= 0 || geometry.scale_bytes < 0 || block_size <= 0) {
    return InvalidArgumentError(
        "KV cache geometry must be positive: " + std::to_string(geometry.num_layers) + " layers, " +
        std::to_string(geometry.num_kv_heads) + " KV heads, head dim " +
        std::to_string(geometry.head_dim) + ", " + std::to_string(geometry.element_bytes) +
        " B per element, block size " + std::to_string(block_size));
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

}  // namespace tokenmill
