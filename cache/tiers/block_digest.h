// Names of KV blocks below the pool: SHA-256 chained over a tier's identity, the cache salt
// and every token up to a block's end. Unlike the pool's 64-bit hash (block_hash.h), which
// only narrows a search among blocks whose tokens are compared, a digest names a file a
// later process finds, so it must not collide.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/types.h"

namespace tokenmill {

using BlockDigest = std::array<uint8_t, 32>;

// One SHA-256 in progress: OpenSSL's own code (SHA-NI where the CPU has it, ~1.8 GB/s here),
// linked in statically (cache/tiers/CMakeLists.txt), so that nothing that links the tier needs
// libcrypto at run time.
class Sha256Stream {
 public:
  static constexpr size_t kStateBytes = 112;
  Sha256Stream();
  void Update(const void* data, size_t size);
  BlockDigest Finish();

 private:
  // OpenSSL's SHA256_CTX, opaque here: its size is fixed by the SHA-256 state it holds.
  alignas(8) unsigned char state_[kStateBytes];
};

// SHA-256 of `bytes`.
BlockDigest Sha256(std::string_view bytes);

// The root of every chain under `identity` (kv_disk_tier.h).
BlockDigest IdentityDigest(std::string_view identity);

// The digests of the full blocks of `tokens` (tokens.size() / block_size of them):
//   d_0 = SHA-256(root || u32 salt size || salt || tokens of block 0)
//   d_i = SHA-256(d_{i-1} || tokens of block i)
// tokens as little-endian int32. `first` digests already computed (prior, of the same
// prefix) are extended rather than recomputed.
std::vector<BlockDigest> ChainBlockDigests(const BlockDigest& root, std::string_view salt,
                                           std::span<const TokenId> tokens, int block_size,
                                           std::vector<BlockDigest> prior = {});
// One link: the digest of the block after `parent` (nullptr: a first block).
BlockDigest NextBlockDigest(const BlockDigest& root, const BlockDigest* parent,
                            std::string_view salt, std::span<const TokenId> block_tokens);

// Lower-case hex.
std::string DigestHex(const BlockDigest& digest);

}  // namespace tokenmill
