// The prefix cache's changes as an outside router tracks them: vLLM's KV cache events
// (BlockStored, BlockRemoved, AllBlocksCleared), which llm-d's precise prefix scorer and
// Dynamo's KV router consume. One event per distinct prefix, not per copy: a prefix two
// blocks hold is stored with its first copy and removed with its last, so a subscriber's
// set of hashes is exactly the set of prefixes a request could hit.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/types.h"

namespace tokenmill {

struct KvCacheEvent {
  enum class Kind { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kBlockStored;
  BlockHash hash = 0;                    // stored, removed
  std::optional<BlockHash> parent_hash;  // stored: the prefix's previous block; none: first
  std::vector<TokenId> tokens;           // stored: the block's tokens
  // Which tier (vLLM's `medium`): empty for the pool a forward pass reads, "CPU" for the host
  // tier below it (--kv-cache-host-size), "DISK" for the disk tier (--kv-cache-dir).
  std::string medium;
  int lora = 0;  // stored: the LoRA adapter that computed the block (0: none)

  static KvCacheEvent Removed(BlockHash hash, std::string medium = "") {
    KvCacheEvent event;
    event.kind = Kind::kBlockRemoved;
    event.hash = hash;
    event.medium = std::move(medium);
    return event;
  }
  static KvCacheEvent AllCleared() {
    KvCacheEvent event;
    event.kind = Kind::kAllBlocksCleared;
    return event;
  }
};

// What a tier below the pool (cache/tiers/) learns of the prefix cache, in order: a distinct
// prefix stored (with its first copy: the block that holds it now, and its identity) or
// removed (with its last copy). Unlike KvCacheEvent it names blocks and prefix ids, which
// only this process knows.
struct PrefixChange {
  bool stored = true;
  BlockId block = 0;            // stored
  PrefixId prefix_id = kEmptyPrefix;
  PrefixId parent_prefix_id = kEmptyPrefix;  // stored
  BlockHash hash = 0;
  BlockHash parent_hash = 0;    // stored; meaningful when parent_prefix_id is set
  std::vector<TokenId> tokens;  // stored
  std::string extra_key;        // stored: the cache salt

  static PrefixChange Removed(PrefixId prefix_id, BlockHash hash) {
    PrefixChange change;
    change.stored = false;
    change.prefix_id = prefix_id;
    change.hash = hash;
    return change;
  }
};

}  // namespace tokenmill
