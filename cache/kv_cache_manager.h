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
//
// Beam search forks a request: the child shares the parent's full blocks by reference and
// gets a copy of only its partial last block (copy-on-write), which the engine copies before
// the next forward pass (BlockCopy).
//
// KV groups (vLLM's hybrid KV cache manager): group 0 holds the full-attention layers (every
// layer of a model without sliding-window layers) and keeps all of a request's blocks. A
// model with sliding-window layers has group 1 too, with its own pool (its blocks hold only
// those layers' K/V) and its own table per request, indexed like group 0's; its blocks that
// lie wholly before the window of every token the request can still compute are released
// (kReleasedBlock in the table) while the request runs. Group 1's cached blocks are keyed by
// group 0's prefix ids, so a hit in it is as exact as in group 0 although its parents may be
// gone.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
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
  // Admitting a request (its first allocation) must leave this many blocks free in each
  // pool, so that running requests can still grow; running requests may use them.
  int watermark_blocks = 0;
  // Set (> 0): the sliding-window layers form KV group 1, whose layers attend to the
  // sliding_window most recent positions (their own included), in a pool of
  // sliding_num_blocks blocks; num_blocks is then group 0's (the full-attention layers').
  int sliding_window = 0;
  int sliding_num_blocks = 0;
};

// A group-1 table entry whose block was released: it lay wholly before the window.
inline constexpr BlockId kReleasedBlock = -1;

// What the manager needs to know of a request; the scheduler builds it from its own type.
struct KvCacheRequest {
  uint64_t id = 0;
  // Prompt plus accepted output: only these are ever hashed, never draft tokens.
  std::span<const TokenId> verified_tokens;
  // Tokens whose K/V are already written in the request's blocks (before this call).
  int num_computed_tokens = 0;
  // Keeps tenants apart: equal prompts with different salts never share blocks.
  std::string_view cache_salt;
  // The LoRA adapter its K/V come from (0: none; the engine's id), which its stored blocks'
  // events report (the salt is what keeps adapters apart).
  int lora = 0;
};

// A prefix-cache hit: cached blocks holding the first num_tokens tokens of a prompt, in
// every KV group (for group 1, those inside the window of the first token to compute).
struct PrefixHit {
  std::vector<BlockId> blocks;          // group 0's
  std::vector<BlockId> sliding_blocks;  // group 1's, as many, kReleasedBlock before the window
  int num_tokens = 0;
};

// A block whose K/V the engine copies before the next forward pass: group `group`'s block
// src (its every layer) into dst.
struct BlockCopy {
  int group = 0;
  BlockId src = 0;
  BlockId dst = 0;
};

// Counters for metrics; the token counters only grow.
struct KvCacheStats {
  int num_blocks = 0;
  int num_free_blocks = 0;  // free, nothing cached
  int num_cached_evictable_blocks = 0;
  int num_in_use_blocks = 0;
  int sliding_num_blocks = 0;         // group 1's pool (0 without sliding-window layers)
  int sliding_num_in_use_blocks = 0;
  int64_t sliding_released_blocks = 0;  // group-1 blocks released outside windows
  double usage = 0.0;               // in use / total, of the fuller pool
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
  // 1, or 2 with a sliding-window group.
  int num_groups() const { return sliding_pool_.has_value() ? 2 : 1; }
  int sliding_window() const { return config_.sliding_window; }
  // The first block index group 1 needs for computing position `position` (with group 1).
  int FirstBlockInWindow(int position) const;
  // Group 0's pool, or group `group`'s.
  const BlockPool& pool(int group = 0) const;
  // Most tokens (new plus lookahead) one AllocateSlots call can serve for a request alone:
  // group 1 must hold their blocks with the window before them. No limit without group 1.
  int max_tokens_per_step() const { return max_tokens_per_step_; }
  // The prefix cache's events go to `log` from now on (BlockPool::set_event_log): group 0's,
  // whose prefixes are the ones a request can hit (group 1 only shortens a hit).
  void set_event_log(std::vector<KvCacheEvent>* log) { pool_.set_event_log(log); }
  // Group 0's distinct prefixes stored and removed go to `log` (BlockPool::set_prefix_log).
  void set_prefix_log(std::vector<PrefixChange>* log) { pool_.set_prefix_log(log); }

  // The longest run of cached full blocks that starts the request's verified tokens, with
  // the request's salt, present in every group (in group 1, the blocks inside the window of
  // the first token after the hit); at least one token is left to compute (its logits are
  // needed). No state change: the blocks stay cached-evictable or in use until
  // AllocateSlots takes them, which must follow before any other allocation. Counts a
  // prefix-cache query. Empty when prefix caching is off or the request already has blocks.
  PrefixHit GetComputedBlocks(const KvCacheRequest& request);
  // The same lookup without counting a query: for a scheduler deciding whether to admit.
  PrefixHit FindComputedBlocks(const KvCacheRequest& request) const;
  bool prefix_caching() const { return config_.enable_prefix_caching; }

  // Makes room for num_new_tokens tokens after request.num_computed_tokens + hit.num_tokens,
  // plus num_lookahead_tokens slots for draft tokens (never hashed), in every group.
  // Transitions:
  //   hit blocks:  cached-evictable -> in use, or in use -> in use (shared, ref + 1)
  //   group 1, blocks wholly before the window of the first token to compute: released as
  //                Free releases them (cached ones stay cached-evictable)
  //   new blocks:  free -> in use, or cached-evictable -> in use (LRU prefix evicted)
  //   full blocks of computed, verified tokens: in use -> in use (cached)
  // Returns group 0's newly allocated blocks (maybe none), or nullopt with no state change
  // when a pool has too few free blocks (keeping watermark_blocks free in each when this is
  // the request's first allocation). A block is hashed only once request.num_computed_tokens
  // covers it, so no hit ever reads K/V that a step has yet to write.
  std::optional<std::vector<BlockId>> AllocateSlots(const KvCacheRequest& request,
                                                    int num_new_tokens,
                                                    int num_lookahead_tokens = 0,
                                                    const PrefixHit& hit = {});

  // Brings blocks a tier below the pool holds back as cached prefix blocks, so that the
  // request's prefix hit (FindComputedBlocks) reaches block end_block: in group 0 its full
  // blocks past those cached, while the pool has free blocks past its watermark; in group 1
  // those of the window of the first token after them that it lacks (some may lie inside the
  // hit: a hit needs group 1's window only). Transitions, in each group: free -> in use (or
  // cached-evictable -> in use, its LRU prefix evicted), fill(index, group_blocks) writes the
  // K/V of the request's block `index` into group_blocks[g] of each group g (kReleasedBlock:
  // not that group's; one entry a group), then in use -> in use (cached) -> cached-evictable at
  // the back of the LRU queue (the last to go), where the request's admission finds them.
  // Cached blocks the import continues are held meanwhile, so it never evicts them. Group 1
  // imports nothing when it has too few free blocks for the window. A fill that returns false
  // ends the import there: its blocks and those after go back free. Returns the fills done.
  int ImportPrefixBlocks(
      const KvCacheRequest& request, int end_block,
      const std::function<bool(int index, std::span<const BlockId> group_blocks)>& fill);

  // in use (uncached, full of computed verified tokens) -> in use (cached), for the
  // request's blocks in order, in every group. AllocateSlots and Free call it; a scheduler
  // may call it after a step to share freshly computed blocks at once.
  void CacheComputedBlocks(const KvCacheRequest& request);

  // A table for `child_id` (which holds none) equal to the request's: its computed full
  // blocks cached first (all its tokens must be computed and verified), then shared, in use
  // -> in use (ref + 1, never copied), in every group; its partial last block, if any, a
  // fresh block (free -> in use) into which the engine copies the request's (the returned
  // copies, one per group). nullopt, changing nothing, when a pool has no free block for
  // the copy (the watermark may be used: the child continues a running request).
  std::optional<std::vector<BlockCopy>> Fork(const KvCacheRequest& request, uint64_t child_id);

  // Caches the request's computed full blocks, then drops its tables, tail first:
  //   in use -> in use (still shared), cached-evictable (back of the LRU queue) or free.
  // No-op for a request without blocks.
  void Free(const KvCacheRequest& request);

  // Drops the request's blocks past the first `num_blocks_kept`, tail first, in every
  // group: in use -> free. For lookahead blocks that only held rejected draft tokens;
  // CHECKs that none of them is cached (a cached block holds verified tokens).
  void FreeTailBlocks(uint64_t request_id, int num_blocks_kept);

  // Drops the request's blocks past the first `num_blocks_kept`, tail first, cached ones
  // included (evicting the middle of a request's K/V), in every group:
  //   in use -> in use (still shared), cached-evictable or free, as Free does.
  // When group 1 released one of the kept blocks, every block goes (the kept tokens must be
  // computed again). Returns the number of blocks kept.
  int TruncateBlocks(uint64_t request_id, int num_blocks_kept);

  // The request's block table in `group` (empty when it has none); group 1's has
  // kReleasedBlock where a block was released.
  std::span<const BlockId> BlockTable(uint64_t request_id, int group = 0) const;

  // Group `group`'s pool grows through `grant` from now on (BlockPool::MakeElastic), before
  // any request is served.
  void MakeElastic(int group, BlockPool::BlockGrant grant);
  // BlockPool::ShrinkTop on group `group`'s pool; the caller releases the blocks' memory.
  int ShrinkTop(int group, int max_blocks, int max_cached);

  // Drops every cached prefix (cached-evictable -> free) when no block is in use, in every
  // pool; returns false, changing nothing, otherwise.
  bool ResetPrefixCache();

  // Drops every table and cached prefix: every block -> free, as at construction. Counters
  // are kept.
  void Reset();

  KvCacheStats Stats() const;

  // Each pool's invariants (BlockPool::CheckInvariants) with each block's ref count equal to
  // the number of tables holding it, plus: no table holds a block twice, each table's cached
  // blocks are a chain of prefixes (block i's parent prefix is block i-1's), and group 1's
  // table is as long as group 0's, released blocks first, its cached blocks holding group 0's
  // prefix at the same index. O(blocks x block_size): for tests, and for TM_DCHECK after
  // each engine step.
  Status CheckInvariants() const;

 private:
  struct Table {
    std::vector<BlockId> blocks;          // group 0
    std::vector<BlockId> sliding_blocks;  // group 1: as many; [0, num_released) released
    int num_cached_blocks = 0;            // blocks[0, num_cached_blocks) hold an identity
    int num_released_blocks = 0;
  };

  BlockPool& mutable_pool(int group);
  // Whether GetComputedBlocks looks the request up: caching on, nothing computed or held.
  bool LooksUp(const KvCacheRequest& request) const;
  // The key of the request's full block `index`, chained to group 0's block index-1.
  BlockKey KeyOfBlock(const KvCacheRequest& request, const Table& table, int index) const;
  // Group 1's blocks of `table` wholly before the window of position first_position, not
  // released yet, tail first.
  std::vector<BlockId> BlocksBeforeWindow(const Table& table, int first_position) const;
  void ReleaseBeforeWindow(Table& table, int first_position);
  Status CheckSlidingTable(const std::string& name, const Table& table,
                           std::span<int> ref_counts) const;

  KvCacheConfig config_;
  BlockPool pool_;
  std::optional<BlockPool> sliding_pool_;
  int max_tokens_per_step_;
  std::unordered_map<uint64_t, Table> tables_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t sliding_released_blocks_ = 0;
};

}  // namespace tokenmill
