// Hashing of full KV blocks for the prefix cache.
//
// A block is keyed by h(parent block's hash, its token ids, extra key). Chaining makes the
// hash depend on the whole prefix; the extra key (a per-tenant cache salt) keeps tenants
// apart. The hash only narrows the search: a hit also compares the tokens (block_pool.h),
// so the function is injectable and tests can force collisions.
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "cache/types.h"

namespace tokenmill {

// The parent hash of a request's first block.
inline constexpr BlockHash kRootBlockHash = 0x6a09e667f3bcc909ULL;

using BlockHasher = std::function<BlockHash(BlockHash parent, std::span<const TokenId> tokens,
                                            std::string_view extra_key)>;

// 64-bit mix of parent, token count, tokens and extra key (splitmix64 finalizer per word).
// Deterministic across runs and machines.
BlockHash HashBlockTokens(BlockHash parent, std::span<const TokenId> tokens,
                          std::string_view extra_key);

inline BlockHasher DefaultBlockHasher() { return &HashBlockTokens; }

}  // namespace tokenmill
