// Ids shared by the block pool, the KV cache manager and their users.
#pragma once

#include <cstdint>

namespace tokenmill {

// Index of a KV block in the pool; the engine addresses K/V at
// slot = block_id * block_size + offset.
using BlockId = int32_t;
// A vocabulary id (same type as the tokenizer's).
using TokenId = int32_t;
// Chained hash of a full block: h(parent hash, the block's token ids, extra key).
using BlockHash = uint64_t;
// Names one exact token prefix (tokens of all blocks up to and including this one, and
// extra key) in the prefix cache; copies of the same prefix share it. 0 = the empty prefix.
using PrefixId = uint64_t;

inline constexpr PrefixId kEmptyPrefix = 0;

}  // namespace tokenmill
