// The prefix cache's changes as an outside router tracks them: vLLM's KV cache events
// (BlockStored, BlockRemoved, AllBlocksCleared), which llm-d's precise prefix scorer and
// Dynamo's KV router consume. One event per distinct prefix, not per copy: a prefix two
// blocks hold is stored with its first copy and removed with its last, so a subscriber's
// set of hashes is exactly the set of prefixes a request could hit.
#pragma once

#include <optional>
#include <vector>

#include "cache/types.h"

namespace tokenmill {

struct KvCacheEvent {
  enum class Kind { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kBlockStored;
  BlockHash hash = 0;                    // stored, removed
  std::optional<BlockHash> parent_hash;  // stored: the prefix's previous block; none: first
  std::vector<TokenId> tokens;           // stored: the block's tokens

  static KvCacheEvent Removed(BlockHash hash) {
    KvCacheEvent event;
    event.kind = Kind::kBlockRemoved;
    event.hash = hash;
    return event;
  }
  static KvCacheEvent AllCleared() {
    KvCacheEvent event;
    event.kind = Kind::kAllBlocksCleared;
    return event;
  }
};

}  // namespace tokenmill
