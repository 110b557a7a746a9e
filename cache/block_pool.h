// A fixed pool of KV blocks: reference counts, the LRU free queue and the prefix-cache
// index. Pure bookkeeping; one engine thread owns it, so there are no locks.
//
// Block states (kv_block.h): free, cached-evictable, in use. Each method below names the
// transitions it makes. Prefix lookups (FindCached) never change state.
//
// An elastic pool (MakeElastic: several models under one KV memory limit) holds only blocks
// [0, active_blocks()); the rest are unbacked (no memory, in no state above). It grows when an
// allocation needs more (Reserve) and gives back blocks from the top (ShrinkTop), so that the
// engine can release one contiguous range of each KV array.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/block_hash.h"
#include "cache/free_block_queue.h"
#include "cache/kv_block.h"
#include "cache/kv_events.h"
#include "common/status.h"

namespace tokenmill {

// The full key of a block for the prefix cache (tokens are not owned).
struct BlockKey {
  BlockHash hash = 0;
  BlockHash parent_hash = kRootBlockHash;
  PrefixId parent_prefix_id = kEmptyPrefix;
  std::span<const TokenId> tokens;
  std::string_view extra_key;
  int lora = 0;  // KvCacheRequest::lora, for the events
};

class BlockPool {
 public:
  // All blocks start free, queued in id order (block 0 is taken first). A pool whose parent
  // prefixes live in another pool (a sliding-window KV group's, keyed by the full-attention
  // group's prefix ids: kv_cache_manager.h) passes keeps_parent_prefixes = false: its blocks
  // may outlive their parents, which a window released first.
  BlockPool(int num_blocks, int block_size, BlockHasher hasher = DefaultBlockHasher(),
            bool keeps_parent_prefixes = true);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Every block id the pool may use (an elastic pool's most).
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks [0, active_blocks()) are backed: num_blocks(), unless elastic.
  int active_blocks() const { return active_blocks_; }
  int block_size() const { return block_size_; }
  // Blocks a fresh allocation can take: free + cached-evictable.
  int num_free_blocks() const { return free_queue_.size(); }
  // Of the free-queue blocks, those still holding a cached prefix.
  int num_cached_evictable_blocks() const { return num_cached_evictable_; }
  int num_in_use_blocks() const { return active_blocks_ - num_free_blocks(); }
  // Fraction of blocks in use (of num_blocks()), in [0, 1].
  double Usage() const;
  // Cached blocks whose prefix was dropped to make room for a fresh allocation.
  int64_t num_evictions() const { return num_evictions_; }

  const KvBlock& block(BlockId id) const;
  // Free-queue block ids from the front (next to be allocated) to the back.
  std::vector<BlockId> FreeQueueIds() const { return free_queue_.Ids(); }

  // Where an elastic pool gets memory for more blocks: it asks for `blocks` and returns how
  // many it grants (fewer, maybe none); the pool cannot serve its requests without `needed`.
  using BlockGrant = std::function<int(int blocks, int needed)>;
  // Every block -> unbacked (no block may be in use or cached); from now on Reserve grows the
  // pool through `grant`.
  void MakeElastic(BlockGrant grant);
  // Whether `count` blocks can be allocated fresh (num_free_blocks() >= count). An elastic
  // pool first grows (unbacked -> free, lowest ids first) when fewer than `count` of its free
  // blocks hold nothing cached, so that memory the limit has to spare is used before a cached
  // prefix is evicted.
  bool Reserve(int count);
  // Gives back at most max_blocks blocks from the top of the backed range, stopping at a block
  // in use, or at a cached one once max_cached were taken: free -> unbacked, or
  // cached-evictable -> unbacked with its prefix evicted (and the prefixes cached after it,
  // which nothing could reach any more). Returns the blocks given back; the caller releases
  // their memory [active_blocks(), active_blocks() + returned).
  int ShrinkTop(int max_blocks, int max_cached);

  // free -> in use, or cached-evictable -> in use with its prefix evicted, for `count`
  // blocks from the front of the free queue; each gets ref count 1. CHECKs that
  // count <= num_free_blocks(): callers ask first, running out is not an error.
  std::vector<BlockId> AllocateFresh(int count);

  // A prefix hit takes its blocks: cached-evictable -> in use (removed from the free queue in
  // O(1)), or in use -> in use with one more reference.
  void Touch(std::span<const BlockId> ids);

  // One reference fewer per block: in use -> in use, or at ref count 0
  //   in use (cached)   -> cached-evictable, pushed at the back (most recently used)
  //   in use (uncached) -> free, pushed at the front (reused first: nothing is lost)
  // Pass a request's blocks tail first, so its tail is evicted before the shared head.
  void Release(std::span<const BlockId> ids_in_eviction_order);

  // The chained hash of a block under this pool's hasher.
  BlockHash Hash(BlockHash parent_hash, std::span<const TokenId> tokens,
                 std::string_view extra_key) const;

  // The cached block (in use or cached-evictable) that holds key.tokens right after the
  // prefix key.parent_prefix_id with key.extra_key; no state change. Matching compares the
  // tokens, extra key and parent prefix, so a hash collision never returns a wrong block.
  // Among equal copies it prefers one in use (sharing it costs no free block), then the
  // lowest id.
  std::optional<BlockId> FindCached(const BlockKey& key) const;

  // in use (uncached, full) -> in use (cached): the block now holds `key` and can be found.
  // Returns its PrefixId: `prefix_id` when given (the id another pool gave the same prefix),
  // else shared with an existing copy of the same prefix, else new.
  PrefixId Cache(BlockId id, const BlockKey& key, std::optional<PrefixId> prefix_id = {});

  // Drops every cached prefix (cached-evictable -> free, queued again in id order) when no
  // block is in use; returns false, changing nothing, otherwise.
  bool ResetPrefixCache();

  // Every backed block -> free, queued in id order, with no prefix cached. The
  // caller drops every block table first. Counters are kept (they are monotonic).
  void Reset();

  // From now on each change of the prefix cache appends its event to `log` (kv_events.h),
  // which the caller drains; null: no events.
  void set_event_log(std::vector<KvCacheEvent>* log) { event_log_ = log; }
  // From now on each distinct prefix stored or removed appends its PrefixChange to `log`
  // (kv_events.h), for a tier below the pool; null: none.
  void set_prefix_log(std::vector<PrefixChange>* log) { prefix_log_ = log; }
  // A kBlockStored event for each prefix cached now (a subscriber's state, for checks).
  std::vector<KvCacheEvent> CachedPrefixes() const;

  // Checks: the free queue is well linked and holds exactly the blocks with ref count 0;
  // free + cached-evictable + in use == total and the counters agree; every cached block's
  // tokens hash to its hash and the index finds it; every cached block's parent prefix is
  // still cached (when the pool keeps its parent prefixes). With expected_ref_counts (one per
  // block), each ref count must equal it.
  Status CheckInvariants(std::span<const int> expected_ref_counts = {}) const;

 private:
  KvBlock& mutable_block(BlockId id);
  bool Matches(const KvBlock& block, const BlockKey& key) const;
  // Drops its identity and index entry; returns whether that was its prefix's last copy.
  bool Evict(KvBlock& block);
  // Evicts the cached-evictable blocks whose parent prefix is in `gone`, and theirs in turn.
  void EvictOrphans(std::unordered_set<PrefixId> gone);
  KvCacheEvent StoredEvent(const BlockIdentity& identity) const;
  void LogEvent(KvCacheEvent event);
  Status CheckFreeQueue() const;
  Status CheckCachedBlock(const KvBlock& block) const;

  int block_size_;
  BlockHasher hasher_;
  bool keeps_parent_prefixes_;
  std::vector<KvBlock> blocks_;
  int active_blocks_ = 0;
  BlockGrant grant_;  // set: elastic
  FreeBlockQueue free_queue_;
  // Hash -> cached blocks with that hash (copies of one prefix, or collisions).
  std::unordered_multimap<BlockHash, BlockId> cached_by_hash_;
  int num_cached_evictable_ = 0;
  PrefixId next_prefix_id_ = kEmptyPrefix + 1;
  int64_t num_evictions_ = 0;
  std::vector<KvCacheEvent>* event_log_ = nullptr;
  std::vector<PrefixChange>* prefix_log_ = nullptr;
};

}  // namespace tokenmill
