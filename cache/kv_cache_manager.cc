#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>

#include "common/check.h"

namespace tokenmill {

namespace {

// Most tokens one step can compute for a request alone when its group-1 pool (less the
// watermark) holds `pool_blocks`: the blocks from the window of its first token to its last,
// at most (window + n - 2) / block_size + 2 of them.
int MaxTokensPerStep(const KvCacheConfig& config) {
  if (config.sliding_window <= 0) return std::numeric_limits<int>::max();
  const int64_t pool_blocks = int64_t{config.sliding_num_blocks} - config.watermark_blocks;
  return static_cast<int>(std::min<int64_t>(
      std::numeric_limits<int>::max(),
      (pool_blocks - 1) * config.block_size - config.sliding_window + 1));
}

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config, BlockHasher hasher)
    : config_(config),
      pool_(config.num_blocks, config.block_size, hasher),
      max_tokens_per_step_(MaxTokensPerStep(config)) {
  TM_CHECK(config.watermark_blocks >= 0 && config.watermark_blocks <= config.num_blocks)
      << "watermark of " << config.watermark_blocks << " blocks";
  if (config.sliding_window > 0) {
    TM_CHECK_GE(max_tokens_per_step_, 1)
        << "a sliding-window pool of " << config.sliding_num_blocks << " blocks of "
        << config.block_size << " (watermark " << config.watermark_blocks
        << ") cannot hold a window of " << config.sliding_window << " tokens and one more";
    sliding_pool_.emplace(config.sliding_num_blocks, config.block_size, std::move(hasher),
                          /*keeps_parent_prefixes=*/false);
  }
}

const BlockPool& KvCacheManager::pool(int group) const {
  TM_CHECK(group >= 0 && group < num_groups()) << "no KV group " << group;
  return group == 0 ? pool_ : *sliding_pool_;
}

int KvCacheManager::FirstBlockInWindow(int position) const {
  return std::max(0, position - config_.sliding_window + 1) / block_size();
}

BlockKey KvCacheManager::KeyOfBlock(const KvCacheRequest& request, const Table& table,
                                    int index) const {
  const int size = block_size();
  BlockKey key;
  key.tokens = request.verified_tokens.subspan(static_cast<size_t>(index) * size, size);
  key.extra_key = request.cache_salt;
  key.lora = request.lora;
  if (index > 0) {
    const BlockIdentity& parent = *pool_.block(table.blocks[index - 1]).identity;
    key.parent_hash = parent.hash;
    key.parent_prefix_id = parent.prefix_id;
  }
  key.hash = pool_.Hash(key.parent_hash, key.tokens, key.extra_key);
  return key;
}

bool KvCacheManager::LooksUp(const KvCacheRequest& request) const {
  return config_.enable_prefix_caching && request.num_computed_tokens == 0 &&
         BlockTable(request.id).empty();
}

PrefixHit KvCacheManager::GetComputedBlocks(const KvCacheRequest& request) {
  if (!LooksUp(request)) return {};
  PrefixHit hit = FindComputedBlocks(request);
  prefix_query_tokens_ += static_cast<int64_t>(request.verified_tokens.size());
  prefix_hit_tokens_ += hit.num_tokens;
  return hit;
}

PrefixHit KvCacheManager::FindComputedBlocks(const KvCacheRequest& request) const {
  PrefixHit hit;
  if (!LooksUp(request)) return hit;
  const int num_tokens = static_cast<int>(request.verified_tokens.size());
  // The last token is always computed again: its logits pick the next token.
  const int max_blocks = num_tokens > 0 ? (num_tokens - 1) / block_size() : 0;
  BlockKey key;
  key.extra_key = request.cache_salt;
  // Group 1's copy of each block hit in group 0 (nullopt: not cached there).
  std::vector<std::optional<BlockId>> sliding;
  for (int i = 0; i < max_blocks; ++i) {
    key.tokens =
        request.verified_tokens.subspan(static_cast<size_t>(i) * block_size(), block_size());
    key.hash = pool_.Hash(key.parent_hash, key.tokens, key.extra_key);
    const std::optional<BlockId> found = pool_.FindCached(key);
    if (!found.has_value()) break;
    hit.blocks.push_back(*found);
    if (sliding_pool_.has_value()) sliding.push_back(sliding_pool_->FindCached(key));
    key.parent_hash = key.hash;
    key.parent_prefix_id = pool_.block(*found).identity->prefix_id;
  }
  if (sliding_pool_.has_value()) {
    // The longest hit whose next token finds group 1's window blocks; those before need not be.
    int num_hit = static_cast<int>(hit.blocks.size());
    const auto window_present = [&](int n) {
      for (int i = FirstBlockInWindow(n * block_size()); i < n; ++i) {
        if (!sliding[i].has_value()) return false;
      }
      return true;
    };
    while (num_hit > 0 && !window_present(num_hit)) --num_hit;
    hit.blocks.resize(static_cast<size_t>(num_hit));
    const int first = num_hit > 0 ? FirstBlockInWindow(num_hit * block_size()) : 0;
    hit.sliding_blocks.assign(static_cast<size_t>(first), kReleasedBlock);
    for (int i = first; i < num_hit; ++i) hit.sliding_blocks.push_back(*sliding[i]);
  }
  hit.num_tokens = static_cast<int>(hit.blocks.size()) * block_size();
  return hit;
}

std::vector<BlockId> KvCacheManager::BlocksBeforeWindow(const Table& table,
                                                        int first_position) const {
  const int end = std::min(FirstBlockInWindow(first_position),
                           static_cast<int>(table.sliding_blocks.size()));
  std::vector<BlockId> tail_first;
  for (int i = end - 1; i >= table.num_released_blocks; --i) {
    tail_first.push_back(table.sliding_blocks[i]);
  }
  return tail_first;
}

void KvCacheManager::ReleaseBeforeWindow(Table& table, int first_position) {
  const std::vector<BlockId> released = BlocksBeforeWindow(table, first_position);
  sliding_pool_->Release(released);
  const int end = table.num_released_blocks + static_cast<int>(released.size());
  std::fill(table.sliding_blocks.begin() + table.num_released_blocks,
            table.sliding_blocks.begin() + end, kReleasedBlock);
  table.num_released_blocks = end;
  sliding_released_blocks_ += static_cast<int64_t>(released.size());
}

std::optional<std::vector<BlockId>> KvCacheManager::AllocateSlots(const KvCacheRequest& request,
                                                                  int num_new_tokens,
                                                                  int num_lookahead_tokens,
                                                                  const PrefixHit& hit) {
  TM_CHECK(num_new_tokens >= 0 && num_lookahead_tokens >= 0)
      << num_new_tokens << " new and " << num_lookahead_tokens << " lookahead tokens";
  const auto existing = tables_.find(request.id);
  const bool first_allocation = existing == tables_.end();
  TM_CHECK_EQ(hit.num_tokens, static_cast<int>(hit.blocks.size()) * block_size());
  TM_CHECK_EQ(hit.sliding_blocks.size(), sliding_pool_.has_value() ? hit.blocks.size() : 0);
  TM_CHECK(hit.blocks.empty() || (first_allocation && request.num_computed_tokens == 0))
      << "a prefix hit is only taken by a request's first allocation";

  const auto num_evictable = [](const BlockPool& pool, std::span<const BlockId> ids) {
    int count = 0;
    for (const BlockId id : ids) {
      if (id == kReleasedBlock) continue;
      const KvBlock& block = pool.block(id);
      TM_CHECK(block.identity.has_value())
          << "hit block " << id << " was evicted between GetComputedBlocks and AllocateSlots";
      if (block.ref_count == 0) ++count;
    }
    return count;
  };
  const int64_t num_tokens =
      int64_t{request.num_computed_tokens} + hit.num_tokens + num_new_tokens + num_lookahead_tokens;
  const int64_t num_required_blocks = (num_tokens + block_size() - 1) / block_size();
  const int64_t num_held_blocks =
      static_cast<int64_t>(hit.blocks.size()) +
      (first_allocation ? 0 : static_cast<int64_t>(existing->second.blocks.size()));
  // Both groups' tables have the same length.
  const int64_t num_to_allocate = std::max<int64_t>(0, num_required_blocks - num_held_blocks);
  const int reserve = first_allocation ? config_.watermark_blocks : 0;
  // Hit blocks in the free queue leave it without being fresh: they count as taken.
  if (!pool_.Reserve(static_cast<int>(num_to_allocate) + reserve +
                     num_evictable(pool_, hit.blocks))) {
    return std::nullopt;
  }
  if (sliding_pool_.has_value()) {
    // Blocks before the window go back first, so they count as free here.
    int num_freed = 0;
    if (!first_allocation) {
      for (const BlockId id : BlocksBeforeWindow(existing->second, request.num_computed_tokens)) {
        if (sliding_pool_->block(id).ref_count == 1) ++num_freed;
      }
    }
    if (!sliding_pool_->Reserve(static_cast<int>(num_to_allocate) + reserve - num_freed +
                                num_evictable(*sliding_pool_, hit.sliding_blocks))) {
      return std::nullopt;
    }
  }

  Table& table = tables_[request.id];
  pool_.Touch(hit.blocks);
  table.blocks.insert(table.blocks.end(), hit.blocks.begin(), hit.blocks.end());
  if (first_allocation) table.num_cached_blocks = static_cast<int>(hit.blocks.size());
  if (sliding_pool_.has_value()) {
    const auto first_held = std::find_if(hit.sliding_blocks.begin(), hit.sliding_blocks.end(),
                                         [](BlockId id) { return id != kReleasedBlock; });
    sliding_pool_->Touch(std::span<const BlockId>(first_held, hit.sliding_blocks.end()));
    table.sliding_blocks.insert(table.sliding_blocks.end(), hit.sliding_blocks.begin(),
                                hit.sliding_blocks.end());
    if (first_allocation) {
      table.num_released_blocks = static_cast<int>(first_held - hit.sliding_blocks.begin());
    }
  }
  // Computed blocks are cached before group 1 releases them, so a later prompt can hit them.
  CacheComputedBlocks(request);
  if (sliding_pool_.has_value()) {
    ReleaseBeforeWindow(table, request.num_computed_tokens + hit.num_tokens);
    const std::vector<BlockId> fresh =
        sliding_pool_->AllocateFresh(static_cast<int>(num_to_allocate));
    table.sliding_blocks.insert(table.sliding_blocks.end(), fresh.begin(), fresh.end());
  }
  std::vector<BlockId> fresh = pool_.AllocateFresh(static_cast<int>(num_to_allocate));
  table.blocks.insert(table.blocks.end(), fresh.begin(), fresh.end());
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
    const BlockKey key = KeyOfBlock(request, table, i);
    const PrefixId prefix_id = pool_.Cache(table.blocks[i], key);
    // Group 1's copy is known by group 0's prefix id: its own parents may be released.
    if (sliding_pool_.has_value() && table.sliding_blocks[i] != kReleasedBlock) {
      sliding_pool_->Cache(table.sliding_blocks[i], key, prefix_id);
    }
    table.num_cached_blocks = i + 1;
  }
}

int KvCacheManager::ImportPrefixBlocks(
    const KvCacheRequest& request, int end_block,
    const std::function<bool(int index, std::span<const BlockId> group_blocks)>& fill) {
  if (!LooksUp(request)) return 0;
  const PrefixHit hit = FindComputedBlocks(request);
  const int num_hit = static_cast<int>(hit.blocks.size());
  const int num_tokens = static_cast<int>(request.verified_tokens.size());
  // As FindComputedBlocks: the last token is computed again.
  const int max_blocks = num_tokens > 0 ? (num_tokens - 1) / block_size() : 0;
  const int wanted = std::min(end_block, max_blocks);
  if (wanted <= num_hit) return 0;
  // Group 0: the hit, then the blocks it caches past the hit (a hit ends where group 1's
  // window does), held through the import; fresh blocks after them.
  Table chain;  // held, then imported; for KeyOfBlock; no request's
  chain.blocks = hit.blocks;
  pool_.Touch(hit.blocks);
  while (static_cast<int>(chain.blocks.size()) < wanted) {
    const std::optional<BlockId> found =
        pool_.FindCached(KeyOfBlock(request, chain, static_cast<int>(chain.blocks.size())));
    if (!found.has_value()) break;
    pool_.Touch(std::span<const BlockId>(&*found, 1));
    chain.blocks.push_back(*found);
  }
  const int num_held = static_cast<int>(chain.blocks.size());
  pool_.Reserve(wanted - num_held + config_.watermark_blocks);
  const int end = num_held + std::clamp(pool_.num_free_blocks() - config_.watermark_blocks, 0,
                                        wanted - num_held);
  std::vector<BlockId> fresh = pool_.AllocateFresh(end - num_held);
  // Group 1: the window of the first token after `end`, its blocks held where cached, else
  // fresh (none when the pool lacks them: no hit without the whole window).
  const int first_window =
      sliding_pool_.has_value() ? FirstBlockInWindow(end * block_size()) : end;
  std::vector<BlockId> sliding;  // [first_window, end)
  std::vector<bool> sliding_fresh;
  for (int i = first_window; i < end; ++i) {
    std::optional<BlockId> cached;
    if (i < num_hit && hit.sliding_blocks[static_cast<size_t>(i)] != kReleasedBlock) {
      cached = hit.sliding_blocks[static_cast<size_t>(i)];
    } else if (i < num_held) {
      cached = sliding_pool_->FindCached(KeyOfBlock(request, chain, i));
    }
    if (cached.has_value()) sliding_pool_->Touch(std::span<const BlockId>(&*cached, 1));
    sliding.push_back(cached.value_or(kReleasedBlock));
    sliding_fresh.push_back(!cached.has_value());
  }
  const int num_sliding_fresh =
      static_cast<int>(std::count(sliding_fresh.begin(), sliding_fresh.end(), true));
  if (num_sliding_fresh > 0 &&
      sliding_pool_->Reserve(num_sliding_fresh + config_.watermark_blocks)) {
    const std::vector<BlockId> taken = sliding_pool_->AllocateFresh(num_sliding_fresh);
    auto next = taken.begin();
    for (size_t k = 0; k < sliding.size(); ++k) {
      if (sliding_fresh[k]) sliding[k] = *next++;
    }
  }
  int filled = 0;
  int next_fresh = 0;
  for (int i = std::min(num_hit, first_window); i < end; ++i) {
    const bool group0_fresh = i >= num_held;
    const size_t w = static_cast<size_t>(i - first_window);
    const bool group1_fresh =
        i >= first_window && sliding_fresh[w] && sliding[w] != kReleasedBlock;
    if (!group0_fresh && !group1_fresh) continue;
    std::vector<BlockId> group_blocks{group0_fresh ? fresh[static_cast<size_t>(next_fresh)]
                                                   : kReleasedBlock};
    if (sliding_pool_.has_value()) {
      group_blocks.push_back(group1_fresh ? sliding[w] : kReleasedBlock);
    }
    if (!fill(i, group_blocks)) break;
    ++filled;
    const BlockKey key = KeyOfBlock(request, chain, i);
    if (group0_fresh) {
      pool_.Cache(group_blocks[0], key);
      chain.blocks.push_back(group_blocks[0]);
      ++next_fresh;
    }
    if (group1_fresh) {
      sliding_pool_->Cache(group_blocks[1], key,
                           pool_.block(chain.blocks[static_cast<size_t>(i)]).identity->prefix_id);
    }
  }
  // Tail first, in each group: what was not filled goes back free, the rest cached-evictable.
  std::vector<BlockId> held = chain.blocks;
  held.insert(held.end(), fresh.begin() + next_fresh, fresh.end());
  std::reverse(held.begin(), held.end());
  pool_.Release(held);
  std::erase(sliding, kReleasedBlock);
  std::reverse(sliding.begin(), sliding.end());
  if (sliding_pool_.has_value()) sliding_pool_->Release(sliding);
  return filled;
}

std::optional<std::vector<BlockCopy>> KvCacheManager::Fork(const KvCacheRequest& request,
                                                            uint64_t child_id) {
  TM_CHECK(!tables_.contains(child_id)) << "request " << child_id << " already has blocks";
  TM_CHECK_EQ(request.num_computed_tokens, static_cast<int>(request.verified_tokens.size()))
      << "request " << request.id << " forks with tokens left to compute";
  const auto it = tables_.find(request.id);
  if (it == tables_.end()) return std::vector<BlockCopy>{};
  const int num_blocks = static_cast<int>(it->second.blocks.size());
  TM_CHECK_EQ(num_blocks, (request.num_computed_tokens + block_size() - 1) / block_size())
      << "request " << request.id << " holds blocks past its tokens";
  const bool partial = request.num_computed_tokens % block_size() != 0;
  if (partial && (!pool_.Reserve(1) || (sliding_pool_.has_value() && !sliding_pool_->Reserve(1)))) {
    return std::nullopt;
  }
  // The shared blocks are then cached in the parent's table as in the child's.
  CacheComputedBlocks(request);
  Table child = it->second;
  const int num_shared = partial ? num_blocks - 1 : num_blocks;
  std::vector<BlockCopy> copies;
  pool_.Touch(std::span<const BlockId>(child.blocks).first(static_cast<size_t>(num_shared)));
  if (partial) {
    const BlockId dst = pool_.AllocateFresh(1)[0];
    copies.push_back(BlockCopy{.group = 0, .src = child.blocks.back(), .dst = dst});
    child.blocks.back() = dst;
  }
  if (sliding_pool_.has_value()) {
    const std::span<const BlockId> shared =
        std::span<const BlockId>(child.sliding_blocks).first(static_cast<size_t>(num_shared));
    sliding_pool_->Touch(shared.subspan(static_cast<size_t>(
        std::min(child.num_released_blocks, num_shared))));
    if (partial) {
      const BlockId dst = sliding_pool_->AllocateFresh(1)[0];
      copies.push_back(BlockCopy{.group = 1, .src = child.sliding_blocks.back(), .dst = dst});
      child.sliding_blocks.back() = dst;
    }
  }
  tables_.emplace(child_id, std::move(child));
  return copies;
}

namespace {

// The ids of blocks[begin, size) tail first, released ones left out.
std::vector<BlockId> HeldTailFirst(std::span<const BlockId> blocks, size_t begin) {
  std::vector<BlockId> ids;
  for (size_t i = blocks.size(); i > begin; --i) {
    if (blocks[i - 1] != kReleasedBlock) ids.push_back(blocks[i - 1]);
  }
  return ids;
}

}  // namespace

void KvCacheManager::Free(const KvCacheRequest& request) {
  const auto it = tables_.find(request.id);
  if (it == tables_.end()) return;
  CacheComputedBlocks(request);
  pool_.Release(HeldTailFirst(it->second.blocks, 0));
  if (sliding_pool_.has_value()) {
    sliding_pool_->Release(HeldTailFirst(it->second.sliding_blocks, 0));
  }
  tables_.erase(it);
}

void KvCacheManager::FreeTailBlocks(uint64_t request_id, int num_blocks_kept) {
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  Table& table = it->second;
  if (num_blocks_kept >= static_cast<int>(table.blocks.size())) return;
  TM_CHECK_LE(table.num_cached_blocks, num_blocks_kept)
      << "request " << request_id << " would free cached blocks";
  const size_t kept = static_cast<size_t>(num_blocks_kept);
  pool_.Release(HeldTailFirst(table.blocks, kept));
  table.blocks.resize(kept);
  if (sliding_pool_.has_value()) {
    TM_CHECK_LE(table.num_released_blocks, num_blocks_kept)
        << "request " << request_id << " would free released blocks";
    sliding_pool_->Release(HeldTailFirst(table.sliding_blocks, kept));
    table.sliding_blocks.resize(kept);
  }
}

int KvCacheManager::TruncateBlocks(uint64_t request_id, int num_blocks_kept) {
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return 0;
  Table& table = it->second;
  // Released group-1 blocks lead the table: keeping any block would keep a hole.
  if (table.num_released_blocks > 0) num_blocks_kept = 0;
  if (num_blocks_kept >= static_cast<int>(table.blocks.size())) {
    return static_cast<int>(table.blocks.size());
  }
  const size_t kept = static_cast<size_t>(num_blocks_kept);
  pool_.Release(HeldTailFirst(table.blocks, kept));
  table.blocks.resize(kept);
  if (sliding_pool_.has_value()) {
    sliding_pool_->Release(HeldTailFirst(table.sliding_blocks, kept));
    table.sliding_blocks.resize(kept);
    table.num_released_blocks = 0;
  }
  table.num_cached_blocks = std::min(table.num_cached_blocks, num_blocks_kept);
  if (table.blocks.empty()) tables_.erase(it);
  return num_blocks_kept;
}

std::span<const BlockId> KvCacheManager::BlockTable(uint64_t request_id, int group) const {
  TM_CHECK(group >= 0 && group < num_groups()) << "no KV group " << group;
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return {};
  return group == 0 ? it->second.blocks : it->second.sliding_blocks;
}

BlockPool& KvCacheManager::mutable_pool(int group) {
  TM_CHECK(group == 0 || (group == 1 && sliding_pool_.has_value())) << "no KV group " << group;
  return group == 0 ? pool_ : *sliding_pool_;
}

void KvCacheManager::MakeElastic(int group, BlockPool::BlockGrant grant) {
  mutable_pool(group).MakeElastic(std::move(grant));
}

int KvCacheManager::ShrinkTop(int group, int max_blocks, int max_cached) {
  return mutable_pool(group).ShrinkTop(max_blocks, max_cached);
}

bool KvCacheManager::ResetPrefixCache() {
  if (pool_.num_in_use_blocks() > 0 ||
      (sliding_pool_.has_value() && sliding_pool_->num_in_use_blocks() > 0)) {
    return false;
  }
  pool_.Reset();
  if (sliding_pool_.has_value()) sliding_pool_->Reset();
  return true;
}

void KvCacheManager::Reset() {
  tables_.clear();
  pool_.Reset();
  if (sliding_pool_.has_value()) sliding_pool_->Reset();
}

KvCacheStats KvCacheManager::Stats() const {
  KvCacheStats stats{
      .num_blocks = pool_.num_blocks(),
      .num_free_blocks = pool_.num_free_blocks() - pool_.num_cached_evictable_blocks(),
      .num_cached_evictable_blocks = pool_.num_cached_evictable_blocks(),
      .num_in_use_blocks = pool_.num_in_use_blocks(),
      .sliding_num_blocks = 0,
      .sliding_num_in_use_blocks = 0,
      .sliding_released_blocks = sliding_released_blocks_,
      .usage = pool_.Usage(),
      .prefix_query_tokens = prefix_query_tokens_,
      .prefix_hit_tokens = prefix_hit_tokens_,
      .evictions = pool_.num_evictions(),
  };
  if (sliding_pool_.has_value()) {
    stats.sliding_num_blocks = sliding_pool_->num_blocks();
    stats.sliding_num_in_use_blocks = sliding_pool_->num_in_use_blocks();
    stats.usage = std::max(stats.usage, sliding_pool_->Usage());
    stats.evictions += sliding_pool_->num_evictions();
  }
  return stats;
}

Status KvCacheManager::CheckSlidingTable(const std::string& name, const Table& table,
                                         std::span<int> ref_counts) const {
  if (table.sliding_blocks.size() != table.blocks.size() || table.num_released_blocks < 0 ||
      table.num_released_blocks > static_cast<int>(table.blocks.size())) {
    return InternalError(name + ": group 1 holds " + std::to_string(table.sliding_blocks.size()) +
                         " blocks (" + std::to_string(table.num_released_blocks) +
                         " released) for group 0's " + std::to_string(table.blocks.size()));
  }
  std::unordered_set<BlockId> seen;
  for (int i = 0; i < static_cast<int>(table.sliding_blocks.size()); ++i) {
    const BlockId id = table.sliding_blocks[i];
    if (i < table.num_released_blocks) {
      if (id != kReleasedBlock) {
        return InternalError(name + ": group 1 still holds released block index " +
                             std::to_string(i));
      }
      continue;
    }
    if (id < 0 || id >= sliding_pool_->num_blocks() || !seen.insert(id).second) {
      return InternalError(name + " holds group-1 block " + std::to_string(id) +
                           " twice or not at all");
    }
    ++ref_counts[id];
    const std::optional<BlockIdentity>& identity = sliding_pool_->block(id).identity;
    if (i >= table.num_cached_blocks) {
      if (identity.has_value()) {
        return InternalError(name + ": group-1 block " + std::to_string(id) +
                             " is cached past the table's cached prefix");
      }
      continue;
    }
    const PrefixId parent =
        i == 0 ? kEmptyPrefix : pool_.block(table.blocks[i - 1]).identity->prefix_id;
    if (!identity.has_value() ||
        identity->prefix_id != pool_.block(table.blocks[i]).identity->prefix_id ||
        identity->parent_prefix_id != parent) {
      return InternalError(name + ": group-1 block " + std::to_string(id) + " at index " +
                           std::to_string(i) + " does not hold group 0's prefix");
    }
  }
  return OkStatus();
}

Status KvCacheManager::CheckInvariants() const {
  std::vector<int> ref_counts(pool_.num_blocks(), 0);
  std::vector<int> sliding_ref_counts(sliding_pool_.has_value() ? sliding_pool_->num_blocks() : 0,
                                      0);
  for (const auto& [request_id, table] : tables_) {
    // Named only on failure (clang 14 cannot capture a structured binding itself).
    const auto name = [id = request_id] { return "request " + std::to_string(id); };
    std::unordered_set<BlockId> seen;
    PrefixId parent_prefix = kEmptyPrefix;
    for (int i = 0; i < static_cast<int>(table.blocks.size()); ++i) {
      const BlockId id = table.blocks[i];
      if (id < 0 || id >= pool_.num_blocks() || !seen.insert(id).second) {
        return InternalError(name() + " holds block " + std::to_string(id) +
                             " twice or not at all");
      }
      ++ref_counts[id];
      const std::optional<BlockIdentity>& identity = pool_.block(id).identity;
      if (i >= table.num_cached_blocks) {
        if (identity.has_value()) {
          return InternalError(name() + ": block " + std::to_string(id) +
                               " is cached past the table's cached prefix");
        }
        continue;
      }
      if (!identity.has_value() || identity->parent_prefix_id != parent_prefix) {
        return InternalError(name() + ": block " + std::to_string(id) + " at index " +
                             std::to_string(i) + " does not continue the cached prefix chain");
      }
      parent_prefix = identity->prefix_id;
    }
    if (sliding_pool_.has_value()) {
      TM_RETURN_IF_ERROR(CheckSlidingTable(name(), table, sliding_ref_counts));
    }
  }
  TM_RETURN_IF_ERROR(pool_.CheckInvariants(ref_counts));
  if (sliding_pool_.has_value()) {
    const Status sliding = sliding_pool_->CheckInvariants(sliding_ref_counts);
    if (!sliding.ok()) return InternalError("KV group 1: " + sliding.message());
  }
  return OkStatus();
}

}  // namespace tokenmill
