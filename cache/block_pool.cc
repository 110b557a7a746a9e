#include "cache/block_pool.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

#include "common/check.h"

namespace tokenmill {

BlockPool::BlockPool(int num_blocks, int block_size, BlockHasher hasher,
                     bool keeps_parent_prefixes)
    : block_size_(block_size),
      hasher_(std::move(hasher)),
      keeps_parent_prefixes_(keeps_parent_prefixes) {
  TM_CHECK_GT(num_blocks, 0);
  TM_CHECK_GT(block_size, 0);
  TM_CHECK(hasher_ != nullptr) << "BlockPool needs a hasher";
  // Sized once: the free queue links point into this vector.
  blocks_.resize(num_blocks);
  active_blocks_ = num_blocks;
  for (BlockId id = 0; id < num_blocks; ++id) {
    blocks_[id].id = id;
    free_queue_.PushBack(&blocks_[id]);
  }
}

void BlockPool::MakeElastic(BlockGrant grant) {
  TM_CHECK(grant != nullptr);
  TM_CHECK(num_in_use_blocks() == 0 && cached_by_hash_.empty())
      << "a pool becomes elastic before it is used";
  free_queue_.Clear();
  active_blocks_ = 0;
  grant_ = std::move(grant);
}

bool BlockPool::Reserve(int count) {
  const int free = num_free_blocks();
  const int uncached = free - num_cached_evictable_;
  const int room = num_blocks() - active_blocks_;
  if (grant_ != nullptr && count > uncached && room > 0) {
    // Grown by a few blocks at least: fewer calls to the shared limit.
    constexpr int kMinGrowth = 16;
    const int wanted = std::min(room, std::max(count - uncached, kMinGrowth));
    const int needed = std::min(room, std::max(0, count - free));
    const int granted = std::clamp(grant_(wanted, needed), 0, wanted);
    for (BlockId id = active_blocks_ + granted - 1; id >= active_blocks_; --id) {
      free_queue_.PushFront(&blocks_[id]);
    }
    active_blocks_ += granted;
  }
  return num_free_blocks() >= count;
}

int BlockPool::ShrinkTop(int max_blocks, int max_cached) {
  int removed = 0;
  std::unordered_set<PrefixId> gone;
  while (removed < max_blocks && active_blocks_ > 0) {
    KvBlock& top = blocks_[active_blocks_ - 1];
    if (top.ref_count > 0) break;
    if (top.identity.has_value()) {
      if (max_cached <= 0) break;
      --max_cached;
      --num_cached_evictable_;
      ++num_evictions_;
      const PrefixId prefix_id = top.identity->prefix_id;
      if (Evict(top)) gone.insert(prefix_id);
    }
    free_queue_.Remove(&top);
    --active_blocks_;
    ++removed;
  }
  if (keeps_parent_prefixes_ && !gone.empty()) EvictOrphans(std::move(gone));
  return removed;
}

void BlockPool::EvictOrphans(std::unordered_set<PrefixId> gone) {
  // A child's prefix id is newer than its parent's: one pass in id order reaches every
  // descendant. A holder of one would hold a copy of its parent too, so none is in use.
  std::vector<KvBlock*> cached;
  for (BlockId id = 0; id < active_blocks_; ++id) {
    if (blocks_[id].identity.has_value()) cached.push_back(&blocks_[id]);
  }
  std::ranges::sort(cached, {}, [](const KvBlock* b) { return b->identity->prefix_id; });
  for (KvBlock* block : cached) {
    if (block->ref_count > 0 || !gone.contains(block->identity->parent_prefix_id)) continue;
    const PrefixId prefix_id = block->identity->prefix_id;
    --num_cached_evictable_;
    ++num_evictions_;
    if (Evict(*block)) gone.insert(prefix_id);
  }
}

double BlockPool::Usage() const {
  return static_cast<double>(num_in_use_blocks()) / static_cast<double>(num_blocks());
}

const KvBlock& BlockPool::block(BlockId id) const {
  TM_CHECK(id >= 0 && id < num_blocks()) << "no block " << id;
  return blocks_[id];
}

KvBlock& BlockPool::mutable_block(BlockId id) {
  TM_CHECK(id >= 0 && id < num_blocks()) << "no block " << id;
  return blocks_[id];
}

std::vector<BlockId> BlockPool::AllocateFresh(int count) {
  TM_CHECK(count >= 0 && count <= num_free_blocks())
      << "asked for " << count << " blocks with " << num_free_blocks() << " free";
  std::vector<BlockId> ids;
  ids.reserve(count);
  for (int i = 0; i < count; ++i) {
    KvBlock* block = free_queue_.PopFront();
    if (block->identity.has_value()) {
      --num_cached_evictable_;
      Evict(*block);
      ++num_evictions_;
    }
    block->ref_count = 1;
    ids.push_back(block->id);
  }
  return ids;
}

void BlockPool::Touch(std::span<const BlockId> ids) {
  for (const BlockId id : ids) {
    KvBlock& block = mutable_block(id);
    if (block.ref_count == 0) {
      TM_CHECK(block.identity.has_value()) << "touched block " << id << " holds no prefix";
      free_queue_.Remove(&block);
      --num_cached_evictable_;
    }
    ++block.ref_count;
  }
}

void BlockPool::Release(std::span<const BlockId> ids_in_eviction_order) {
  for (const BlockId id : ids_in_eviction_order) {
    KvBlock& block = mutable_block(id);
    TM_CHECK_GT(block.ref_count, 0) << "block " << id << " released more often than taken";
    if (--block.ref_count > 0) continue;
    if (block.identity.has_value()) {
      free_queue_.PushBack(&block);
      ++num_cached_evictable_;
    } else {
      free_queue_.PushFront(&block);
    }
  }
}

BlockHash BlockPool::Hash(BlockHash parent_hash, std::span<const TokenId> tokens,
                          std::string_view extra_key) const {
  return hasher_(parent_hash, tokens, extra_key);
}

bool BlockPool::Matches(const KvBlock& block, const BlockKey& key) const {
  const BlockIdentity& identity = *block.identity;
  return identity.parent_prefix_id == key.parent_prefix_id && identity.extra_key == key.extra_key &&
         std::equal(identity.tokens.begin(), identity.tokens.end(), key.tokens.begin(),
                    key.tokens.end());
}

std::optional<BlockId> BlockPool::FindCached(const BlockKey& key) const {
  std::optional<BlockId> best;
  const auto [begin, end] = cached_by_hash_.equal_range(key.hash);
  for (auto it = begin; it != end; ++it) {
    const KvBlock& candidate = blocks_[it->second];
    if (!Matches(candidate, key)) continue;  // a hash collision: a different prefix
    const auto rank = [](const KvBlock& b) { return std::pair(b.ref_count == 0, b.id); };
    if (!best.has_value() || rank(candidate) < rank(blocks_[*best])) best = candidate.id;
  }
  return best;
}

PrefixId BlockPool::Cache(BlockId id, const BlockKey& key, std::optional<PrefixId> prefix_id) {
  KvBlock& block = mutable_block(id);
  TM_CHECK_GT(block.ref_count, 0) << "only a block in use can be cached";
  TM_CHECK(!block.identity.has_value()) << "block " << id << " is already cached";
  TM_CHECK_EQ(static_cast<int>(key.tokens.size()), block_size_) << "only full blocks are cached";
  std::optional<BlockId> copy;  // of the same prefix: then no event, it is known already
  if (!prefix_id.has_value()) {
    copy = FindCached(key);
    prefix_id = copy.has_value() ? blocks_[*copy].identity->prefix_id : next_prefix_id_++;
  }
  block.identity = BlockIdentity{
      .hash = key.hash,
      .parent_hash = key.parent_hash,
      .prefix_id = *prefix_id,
      .parent_prefix_id = key.parent_prefix_id,
      .tokens = std::vector<TokenId>(key.tokens.begin(), key.tokens.end()),
      .extra_key = std::string(key.extra_key),
      .lora = key.lora,
  };
  cached_by_hash_.emplace(key.hash, id);
  if (!copy.has_value()) {
    LogEvent(StoredEvent(*block.identity));
    if (prefix_log_ != nullptr) {
      const BlockIdentity& identity = *block.identity;
      prefix_log_->push_back({.stored = true,
                              .block = id,
                              .prefix_id = identity.prefix_id,
                              .parent_prefix_id = identity.parent_prefix_id,
                              .hash = identity.hash,
                              .parent_hash = identity.parent_hash,
                              .tokens = identity.tokens,
                              .extra_key = identity.extra_key});
    }
  }
  return *prefix_id;
}

KvCacheEvent BlockPool::StoredEvent(const BlockIdentity& identity) const {
  KvCacheEvent event;
  event.hash = identity.hash;
  if (identity.parent_prefix_id != kEmptyPrefix) event.parent_hash = identity.parent_hash;
  event.tokens = identity.tokens;
  event.lora = identity.lora;
  return event;
}

void BlockPool::LogEvent(KvCacheEvent event) {
  if (event_log_ != nullptr) event_log_->push_back(std::move(event));
}

std::vector<KvCacheEvent> BlockPool::CachedPrefixes() const {
  std::vector<KvCacheEvent> prefixes;
  std::unordered_set<PrefixId> seen;
  for (const KvBlock& block : blocks_) {
    if (block.identity.has_value() && seen.insert(block.identity->prefix_id).second) {
      prefixes.push_back(StoredEvent(*block.identity));
    }
  }
  return prefixes;
}

bool BlockPool::Evict(KvBlock& block) {
  const BlockHash hash = block.identity->hash;
  const PrefixId prefix_id = block.identity->prefix_id;
  const auto [begin, end] = cached_by_hash_.equal_range(hash);
  bool last_copy = true;
  for (auto it = begin; it != end;) {
    if (it->second == block.id) {
      it = cached_by_hash_.erase(it);
    } else {
      last_copy = last_copy && blocks_[it->second].identity->prefix_id != prefix_id;
      ++it;
    }
  }
  block.identity.reset();
  if (!last_copy) return false;
  LogEvent(KvCacheEvent::Removed(hash));
  if (prefix_log_ != nullptr) {
    prefix_log_->push_back(PrefixChange::Removed(prefix_id, hash));
  }
  return true;
}

bool BlockPool::ResetPrefixCache() {
  if (num_in_use_blocks() > 0) return false;
  Reset();
  return true;
}

void BlockPool::Reset() {
  if (!cached_by_hash_.empty()) LogEvent(KvCacheEvent::AllCleared());
  if (prefix_log_ != nullptr) {
    std::unordered_set<PrefixId> removed;
    for (const KvBlock& block : blocks_) {
      if (block.identity.has_value() && removed.insert(block.identity->prefix_id).second) {
        prefix_log_->push_back(
            PrefixChange::Removed(block.identity->prefix_id, block.identity->hash));
      }
    }
  }
  free_queue_.Clear();
  for (KvBlock& block : blocks_) {
    block.ref_count = 0;
    block.identity.reset();
    if (block.id < active_blocks_) free_queue_.PushBack(&block);
  }
  cached_by_hash_.clear();
  num_cached_evictable_ = 0;
}

Status BlockPool::CheckFreeQueue() const {
  int walked = 0;
  const KvBlock* prev = nullptr;
  for (const KvBlock* b = free_queue_.front(); b != nullptr; b = b->next_free) {
    if (++walked > num_blocks()) return InternalError("the free queue has a cycle");
    if (b->prev_free != prev) {
      return InternalError("free queue block " + std::to_string(b->id) + " has a wrong prev link");
    }
    if (!b->in_free_queue || b->ref_count != 0) {
      return InternalError("free queue holds block " + std::to_string(b->id) + " with ref count " +
                           std::to_string(b->ref_count));
    }
    prev = b;
  }
  if (walked != free_queue_.size()) {
    return InternalError("the free queue links " + std::to_string(walked) + " blocks but counts " +
                         std::to_string(free_queue_.size()));
  }
  return OkStatus();
}

Status BlockPool::CheckCachedBlock(const KvBlock& block) const {
  const BlockIdentity& identity = *block.identity;
  // Named only on failure: the check runs on every block at every scheduler step in debug and
  // sanitizer builds.
  const auto name = [&] { return "cached block " + std::to_string(block.id); };
  if (static_cast<int>(identity.tokens.size()) != block_size_) {
    return InternalError(name() + " holds " + std::to_string(identity.tokens.size()) + " tokens");
  }
  if (hasher_(identity.parent_hash, identity.tokens, identity.extra_key) != identity.hash) {
    return InternalError(name() + ": its tokens do not hash to its hash");
  }
  if (identity.parent_prefix_id >= identity.prefix_id) {
    return InternalError(name() + ": its prefix id is not newer than its parent's");
  }
  const auto [begin, end] = cached_by_hash_.equal_range(identity.hash);
  if (std::none_of(begin, end, [&](const auto& entry) { return entry.second == block.id; })) {
    return InternalError(name() + " is missing from the hash index");
  }
  return OkStatus();
}

Status BlockPool::CheckInvariants(std::span<const int> expected_ref_counts) const {
  TM_RETURN_IF_ERROR(CheckFreeQueue());
  if (!expected_ref_counts.empty() &&
      static_cast<int>(expected_ref_counts.size()) != num_blocks()) {
    return InternalError("expected ref counts for " + std::to_string(expected_ref_counts.size()) +
                         " blocks, the pool has " + std::to_string(num_blocks()));
  }
  int num_free = 0;
  int num_cached_evictable = 0;
  int num_in_use = 0;
  int num_cached = 0;
  std::unordered_set<PrefixId> cached_prefixes;
  for (const KvBlock& block : blocks_) {
    const auto name = [&] { return "block " + std::to_string(block.id); };
    if (block.id >= active_blocks_) {
      if (block.ref_count != 0 || block.identity.has_value() || block.in_free_queue) {
        return InternalError(name() + " is unbacked but in use, cached or queued");
      }
      continue;
    }
    if (block.ref_count < 0) return InternalError(name() + " has a negative ref count");
    if ((block.ref_count == 0) != block.in_free_queue) {
      return InternalError(name() + " with ref count " + std::to_string(block.ref_count) +
                           (block.in_free_queue ? " is" : " is not") + " in the free queue");
    }
    if (!expected_ref_counts.empty() && expected_ref_counts[block.id] != block.ref_count) {
      return InternalError(name() + " has ref count " + std::to_string(block.ref_count) + " but " +
                           std::to_string(expected_ref_counts[block.id]) + " block tables hold it");
    }
    if (block.ref_count > 0) {
      ++num_in_use;
    } else if (block.identity.has_value()) {
      ++num_cached_evictable;
    } else {
      ++num_free;
    }
    if (block.identity.has_value()) {
      TM_RETURN_IF_ERROR(CheckCachedBlock(block));
      cached_prefixes.insert(block.identity->prefix_id);
      ++num_cached;
    }
  }
  if (num_free + num_cached_evictable + num_in_use != active_blocks_ ||
      num_free + num_cached_evictable != num_free_blocks() ||
      num_cached_evictable != num_cached_evictable_) {
    return InternalError("free " + std::to_string(num_free) + " + cached-evictable " +
                         std::to_string(num_cached_evictable) + " + in use " +
                         std::to_string(num_in_use) + " disagree with total " +
                         std::to_string(active_blocks_) + ", queue length " +
                         std::to_string(num_free_blocks()) + ", evictable counter " +
                         std::to_string(num_cached_evictable_));
  }
  if (static_cast<int>(cached_by_hash_.size()) != num_cached) {
    return InternalError("the hash index has " + std::to_string(cached_by_hash_.size()) +
                         " entries for " + std::to_string(num_cached) + " cached blocks");
  }
  for (const KvBlock& block : blocks_) {
    if (keeps_parent_prefixes_ && block.identity.has_value() &&
        block.identity->parent_prefix_id != kEmptyPrefix &&
        !cached_prefixes.contains(block.identity->parent_prefix_id)) {
      return InternalError("cached block " + std::to_string(block.id) +
                           " outlived every copy of its parent prefix");
    }
  }
  return OkStatus();
}

}  // namespace tokenmill
