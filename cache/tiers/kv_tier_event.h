// A change of a KV tier's contents, for the KV events routers read (cache/kv_events.h).
#pragma once

#include <optional>
#include <vector>

#include "cache/types.h"

namespace tokenmill {

// In the pool's own hashes (which each disk file keeps in its header, and the host tier beside
// each block).
struct KvTierEvent {
  bool stored = true;  // false: removed
  BlockHash hash = 0;
  std::optional<BlockHash> parent_hash;  // stored: none for a first block
  std::vector<TokenId> tokens;           // stored
};

}  // namespace tokenmill
