// An engine's KV pools under a memory limit shared with other engines (the models of one
// server, cache/kv_memory_budget.h): each pool grows from the limit as its requests need
// blocks, and gives blocks back from its top, with their memory, when another engine asks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "cache/kv_memory_budget.h"
#include "common/status.h"

namespace tokenmill {

class ElasticKv {
 public:
  // Lets the memory of blocks [first_block, end_block) of KV group `group` go: the backend's
  // pool, and a draft model's over the same ids.
  using ReleaseKv = std::function<Status(int group, int64_t first_block, int64_t end_block)>;

  // Makes every pool of `kv` elastic (before any request). group_block_bytes[g]: what one
  // block of group g takes of the limit (a draft model's KV included).
  ElasticKv(KvCacheManager& kv, ReleaseKv release, std::unique_ptr<KvMemoryShare> share,
            std::vector<int64_t> group_block_bytes);

  // Before a step: an ask for memory is made again by the step if it still lacks it.
  void BeginStep() { share_->ClearWant(); }
  // Between steps: gives back what the other engines ask for, if it can: free and cached
  // blocks from the top of each pool (down to its first block in use).
  void GiveBack();
  // Called (from another engine's thread) when GiveBack may have work or a step may now grow;
  // it must only signal the engine. Null: none.
  void set_wake(std::function<void()> wake) { share_->set_wake(std::move(wake)); }
  int64_t held_bytes() const { return share_->held_bytes(); }

 private:
  KvCacheManager& kv_;
  const ReleaseKv release_;
  std::unique_ptr<KvMemoryShare> share_;
  const std::vector<int64_t> group_block_bytes_;
};

}  // namespace tokenmill
