#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

#include "common/check.h"

namespace tokenmill {

KvCacheManager::KvCacheManager(const KvCacheConfig& config, BlockHasher hasher)
    : config_(config), pool_(config.num_blocks, config.block_size, std::move(hasher)) {
  TM_CHECK(config.watermark_blocks >= 0 && config.watermark_blocks <= config.num_blocks)
      << "watermark of " << config.watermark_blocks << " blocks";
}

BlockKey KvCacheManager::KeyOfBlock(const KvCacheRequest& request, const Table& table,
                                    int index) const {
  const int size = block_size();
  BlockKey key;
  key.tokens = request.verified_tokens.subspan(static_cast<size_t>(index) * size, size);
  key.extra_key = request.cache_salt;
  if (index > 0) {
    const BlockIdentity& parent = *pool_.block(table.blocks[index - 1]).identity;
    key.parent_hash = parent.hash;
    key.parent_prefix_id = parent.prefix_id;
  }
  key.hash = pool_.Hash(key.parent_hash, key.tokens, key.extra_key);
  return key;
}

PrefixHit KvCacheManager::GetComputedBlocks(const KvCacheRequest& request) {
  PrefixHit hit;
  if (!config_.enable_prefix_caching || request.num_computed_tokens > 0 ||
      !BlockTable(request.id).empty()) {
    return hit;
  }
  const int num_tokens = static_cast<int>(request.verified_tokens.size());
  prefix_query_tokens_ += num_tokens;
  // The last token is always computed again: its logits pick the next token.
  const int max_blocks = num_tokens > 0 ? (num_tokens - 1) / block_size() : 0;
  BlockKey key;
  key.extra_key = request.cache_salt;
  for (int i = 0; i < max_blocks; ++i) {
    key.tokens =
        request.verified_tokens.subspan(static_cast<size_t>(i) * block_size(), block_size());
    key.hash = pool_.Hash(key.parent_hash, key.tokens, key.extra_key);
    const std::optional<BlockId> found = pool_.FindCached(key);
    if (!found.has_value()) break;
    hit.blocks.push_back(*found);
    key.parent_hash = key.hash;
    key.parent_prefix_id = pool_.block(*found).identity->prefix_id;
  }
  hit.num_tokens = static_cast<int>(hit.blocks.size()) * block_size();
  prefix_hit_tokens_ += hit.num_tokens;
  return hit;
}

std::optional<std::vector<BlockId>> KvCacheManager::AllocateSlots(const KvCacheRequest& request,
                                                                  int num_new_tokens,
                                                                  int num_lookahead_tokens,
                                                                  const PrefixHit& hit) {
  TM_CHECK(num_new_tokens >= 0 && num_lookahead_tokens >= 0)
      << num_new_tokens << " new and " << num_lookahead_tokens << " lookahead tokens";
  const std::span<const BlockId> existing = BlockTable(request.id);
  const bool first_allocation = existing.empty();
  TM_CHECK_EQ(hit.num_tokens, static_cast<int>(hit.blocks.size()) * block_size());
  TM_CHECK(hit.blocks.empty() || (first_allocation && request.num_computed_tokens == 0))
      << "a prefix hit is only taken by a request's first allocation";

  int evictable_hit_blocks = 0;
  for (const BlockId id : hit.blocks) {
    const KvBlock& block = pool_.block(id);
    TM_CHECK(block.identity.has_value())
        << "hit block " << id << " was evicted between GetComputedBlocks and AllocateSlots";
    if (block.ref_count == 0) ++evictable_hit_blocks;
  }
  const int64_t num_tokens =
      int64_t{request.num_computed_tokens} + hit.num_tokens + num_new_tokens + num_lookahead_tokens;
  const int64_t num_required_blocks = (num_tokens + block_size() - 1) / block_size();
  const int64_t num_held_blocks = static_cast<int64_t>(existing.size() + hit.blocks.size());
  const int64_t num_to_allocate = std::max<int64_t>(0, num_required_blocks - num_held_blocks);
  const int reserve = first_allocation ? config_.watermark_blocks : 0;
  if (num_to_allocate + reserve > pool_.num_free_blocks() - evictable_hit_blocks) {
    return std::nullopt;
  }

  Table& table = tables_[request.id];
  pool_.Touch(hit.blocks);
  table.blocks.insert(table.blocks.end(), hit.blocks.begin(), hit.blocks.end());
  if (first_allocation) table.num_cached_blocks = static_cast<int>(hit.blocks.size());
  std::vector<BlockId> fresh = pool_.AllocateFresh(static_cast<int>(num_to_allocate));
  table.blocks.insert(table.blocks.end(), fresh.begin(), fresh.end());
  CacheComputedBlocks(request);
  return fresh;
}

void KvCacheManager::CacheComputedBlocks(const KvCacheRequest& request) {
  if (!config_.enable_prefix_caching) return;
  const auto it = tables_.find(request.id);
  if (it == tables_.end()) return;
  Table& table = it->second;
  const int num_verified_computed =
      std::min(request.num_computed_tokens, static_cast<int>(request.verified_tokens.size()));
  const int num_full_blocks =
      std::min(num_verified_computed / block_size(), static_cast<int>(table.blocks.size()));
  for (int i = table.num_cached_blocks; i < num_full_blocks; ++i) {
    pool_.Cache(table.blocks[i], KeyOfBlock(request, table, i));
    table.num_cached_blocks = i + 1;
  }
}

void KvCacheManager::Free(const KvCacheRequest& request) {
  const auto it = tables_.find(request.id);
  if (it == tables_.end()) return;
  CacheComputedBlocks(request);
  const std::vector<BlockId> tail_first(it->second.blocks.rbegin(), it->second.blocks.rend());
  pool_.Release(tail_first);
  tables_.erase(it);
}

void KvCacheManager::FreeTailBlocks(uint64_t request_id, int num_blocks_kept) {
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& table = it->second;
  if (num_blocks_kept >= static_cast<int>(table.blocks.size())) return;
  TM_CHECK_LE(table.num_cached_blocks, num_blocks_kept)
      << "request " << request_id << " would free cached blocks";
  const std::vector<BlockId> tail_first(table.blocks.rbegin(),
                                        table.blocks.rend() - num_blocks_kept);
  pool_.Release(tail_first);
  table.blocks.resize(static_cast<size_t>(num_blocks_kept));
}

void KvCacheManager::TruncateBlocks(uint64_t request_id, int num_blocks_kept) {
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& table = it->second;
  if (num_blocks_kept >= static_cast<int>(table.blocks.size())) return;
  const std::vector<BlockId> tail_first(table.blocks.rbegin(),
                                        table.blocks.rend() - num_blocks_kept);
  pool_.Release(tail_first);
  table.blocks.resize(static_cast<size_t>(num_blocks_kept));
  table.num_cached_blocks = std::min(table.num_cached_blocks, num_blocks_kept);
  if (table.blocks.empty()) tables_.erase(it);
}

std::span<const BlockId> KvCacheManager::BlockTable(uint64_t request_id) const {
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return {};
  return it->second.blocks;
}

void KvCacheManager::Reset() {
  tables_.clear();
  pool_.Reset();
}

KvCacheStats KvCacheManager::Stats() const {
  return KvCacheStats{
      .num_blocks = pool_.num_blocks(),
      .num_free_blocks = pool_.num_free_blocks() - pool_.num_cached_evictable_blocks(),
      .num_cached_evictable_blocks = pool_.num_cached_evictable_blocks(),
      .num_in_use_blocks = pool_.num_in_use_blocks(),
      .usage = pool_.Usage(),
      .prefix_query_tokens = prefix_query_tokens_,
      .prefix_hit_tokens = prefix_hit_tokens_,
      .evictions = pool_.num_evictions(),
  };
}

Status KvCacheManager::CheckInvariants() const {
  std::vector<int> ref_counts(pool_.num_blocks(), 0);
  for (const auto& [request_id, table] : tables_) {
    const std::string name = "request " + std::to_string(request_id);
    std::unordered_set<BlockId> seen;
    PrefixId parent_prefix = kEmptyPrefix;
    for (int i = 0; i < static_cast<int>(table.blocks.size()); ++i) {
      const BlockId id = table.blocks[i];
      if (id < 0 || id >= pool_.num_blocks() || !seen.insert(id).second) {
        return InternalError(name + " holds block " + std::to_string(id) + " twice or not at all");
      }
      ++ref_counts[id];
      const std::optional<BlockIdentity>& identity = pool_.block(id).identity;
      if (i >= table.num_cached_blocks) {
        if (identity.has_value()) {
          return InternalError(name + ": block " + std::to_string(id) +
                               " is cached past the table's cached prefix");
        }
        continue;
      }
      if (!identity.has_value() || identity->parent_prefix_id != parent_prefix) {
        return InternalError(name + ": block " + std::to_string(id) + " at index " +
                             std::to_string(i) + " does not continue the cached prefix chain");
      }
      parent_prefix = identity->prefix_id;
    }
  }
  return pool_.CheckInvariants(ref_counts);
}

}  // namespace tokenmill
