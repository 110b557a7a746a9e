// One KV block's bookkeeping (the K/V bytes themselves live in the engine).
//
// A block is in exactly one of three states:
//   free               ref_count == 0, no identity, in the free queue
//   cached-evictable   ref_count == 0, identity set, in the free queue (reusable by a hit)
//   in use             ref_count > 0 (held by that many block tables), not in the queue;
//                      its identity is set once it is full of computed, verified tokens
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cache/types.h"

namespace tokenmill {

// What a cached block holds: the tokens that follow a given prefix.
struct BlockIdentity {
  BlockHash hash = 0;
  BlockHash parent_hash = 0;
  PrefixId prefix_id = kEmptyPrefix;         // the prefix ending with this block
  PrefixId parent_prefix_id = kEmptyPrefix;  // the prefix before it (empty for a first block)
  std::vector<TokenId> tokens;               // exactly block_size verified tokens
  std::string extra_key;                     // e.g. the tenant's cache salt
  int lora = 0;                              // the adapter that computed it (events only)
};

struct KvBlock {
  BlockId id = 0;
  int ref_count = 0;
  std::optional<BlockIdentity> identity;  // set: the block is in the prefix cache

  // Intrusive links of the free queue (free_block_queue.h); null at either end.
  KvBlock* prev_free = nullptr;
  KvBlock* next_free = nullptr;
  bool in_free_queue = false;
};

}  // namespace tokenmill
