// KvCacheManager: block tables per request on top of the BlockPool, with automatic prefix
// caching. The scheduler asks it where a request's K/V go; the engine writes K/V at
// slot = block_id * block_size + offset of the request's table.
//
// Typical use by a scheduler, one engine thread, no locks:
//   admit:  hit = GetComputedBlocks(req); AllocateSlots(req, n, lookahead, hit)
//           then num_computed_tokens += hit.num_tokens (nothing to compute for those)
//   step:   AllocateSlots(req, n, lookahead) for the tokens it computes this step
//   end:    Free(req) when it finishes, is aborted or is preempted
// AllocateSlots returns nothing, changing nothing, when the pool cannot serve it: the
// scheduler then waits or preempts. That is not an error.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_pool.h"
#include "cache/types.h"
#include "common/status.h"

namespace tokenmill {

struct KvCacheConfig {
  int num_blocks = 0;
  int block_size = 16;
  bool enable_prefix_caching = true;
  // Admitting a request (its first allocation) must leave this many blocks free, so that
  // running requests can still grow; running requests may use them.
  int watermark_blocks = 0;
};

// What the manager needs to know of a request; the scheduler builds it from its own type.
struct KvCacheRequest {
  uint64_t id = 0;
  // Prompt plus accepted output: only these are ever hashed, never draft tokens.
  std::span<const TokenId> verified_tokens;
  // Tokens whose K/V are already written in the request's blocks (before this call).
  int num_computed_tokens = 0;
  // Keeps tenants apart: equal prompts with different salts never share blocks.
  std::string_view cache_salt;
};

// A prefix-cache hit: cached blocks holding the first num_tokens tokens of a prompt.
struct PrefixHit {
  std::vector<BlockId> blocks;
  int num_tokens = 0;
};

// Counters for metrics; the token counters only grow.
struct KvCacheStats {
  int num_blocks = 0;
  int num_free_blocks = 0;  // free, nothing cached
  int num_cached_evictable_blocks = 0;
  int num_in_use_blocks = 0;
  double usage = 0.0;               // in use / total
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up by GetComputedBlocks
  int64_t prefix_hit_tokens = 0;    // of those, found in the cache
  int64_t evictions = 0;            // cached blocks reused for other K/V
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config, BlockHasher hasher = DefaultBlockHasher());
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  int block_size() const { return pool_.block_size(); }
  int num_blocks() const { return pool_.num_blocks(); }
  int watermark_blocks() const { return config_.watermark_blocks; }
  const BlockPool& pool() const { return pool_; }
  // The prefix cache's events go to `log` from now on (BlockPool::set_event_log).
  void set_event_log(std::vector<KvCacheEvent>* log) { pool_.set_event_log(log); }

  // The longest run of cached full blocks that starts the request's verified tokens, with
  // the request's salt; at least one token is left to compute (its logits are needed).
  // No state change: the blocks stay cached-evictable or in use until AllocateSlots takes
  // them, which must follow before any other allocation. Counts a prefix-cache query.
  // Empty when prefix caching is off or the request already has blocks.
  PrefixHit GetComputedBlocks(const KvCacheRequest& request);

  // Makes room for num_new_tokens tokens after request.num_computed_tokens + hit.num_tokens,
  // plus num_lookahead_tokens slots for draft tokens (never hashed). Transitions:
  //   hit blocks:  cached-evictable -> in use, or in use -> in use (shared, ref + 1)
  //   new blocks:  free -> in use, or cached-evictable -> in use (LRU prefix evicted)
  //   full blocks of computed, verified tokens: in use -> in use (cached)
  // Returns the newly allocated blocks (maybe none), or nullopt with no state change when
  // the pool has too few free blocks (keeping watermark_blocks free when this is the
  // request's first allocation). A block is hashed only once request.num_computed_tokens
  // covers it, so no hit ever reads K/V that a step has yet to write.
  std::optional<std::vector<BlockId>> AllocateSlots(const KvCacheRequest& request,
                                                    int num_new_tokens,
                                                    int num_lookahead_tokens = 0,
                                                    const PrefixHit& hit = {});

  // in use (uncached, full of computed verified tokens) -> in use (cached), for the
  // request's blocks in order. AllocateSlots and Free call it; a scheduler may call it after
  // a step to share freshly computed blocks at once.
  void CacheComputedBlocks(const KvCacheRequest& request);

  // Caches the request's computed full blocks, then drops its table, tail first:
  //   in use -> in use (still shared), cached-evictable (back of the LRU queue) or free.
  // No-op for a request without blocks.
  void Free(const KvCacheRequest& request);

  // Drops the request's blocks past the first `num_blocks_kept`, tail first: in use -> free.
  // For lookahead blocks that only held rejected draft tokens; CHECKs that none of them is
  // cached (a cached block holds verified tokens).
  void FreeTailBlocks(uint64_t request_id, int num_blocks_kept);

  // Drops the request's blocks past the first `num_blocks_kept`, tail first, cached ones
  // included (evicting the middle of a request's K/V):
  //   in use -> in use (still shared), cached-evictable or free, as Free does.
  void TruncateBlocks(uint64_t request_id, int num_blocks_kept);

  // The request's block table (empty when it has none).
  std::span<const BlockId> BlockTable(uint64_t request_id) const;

  // Drops every cached prefix (cached-evictable -> free) when no block is in use; returns
  // false otherwise.
  bool ResetPrefixCache() { return pool_.ResetPrefixCache(); }

  // Drops every table and cached prefix: every block -> free, as at construction. Counters
  // are kept.
  void Reset();

  KvCacheStats Stats() const;

  // The pool's invariants (BlockPool::CheckInvariants) with each block's ref count equal to
  // the number of tables holding it, plus: no table holds a block twice, and each table's
  // cached blocks are a chain of prefixes (block i's parent prefix is block i-1's).
  // O(blocks x block_size): for tests, and for TM_DCHECK after each engine step.
  Status CheckInvariants() const;

 private:
  struct Table {
    std::vector<BlockId> blocks;
    int num_cached_blocks = 0;  // blocks[0, num_cached_blocks) hold an identity
  };

  // The key of the request's full block `index`, chained to the table's block index-1.
  BlockKey KeyOfBlock(const KvCacheRequest& request, const Table& table, int index) const;

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<uint64_t, Table> tables_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace tokenmill
