#include "cache/block_hash.h"

#include "common/hash.h"

namespace tokenmill {
namespace {

uint64_t Combine(uint64_t seed, uint64_t value) { return Mix64(seed + kGoldenGamma + value); }

}  // namespace

BlockHash HashBlockTokens(BlockHash parent, std::span<const TokenId> tokens,
                          std::string_view extra_key) {
  uint64_t h = Combine(parent, tokens.size());
  for (const TokenId token : tokens) h = Combine(h, static_cast<uint32_t>(token));
  // Length first, so ("ab", "") and ("a", "b")-style splits of the key cannot alias.
  h = Combine(h, extra_key.size());
  for (const char c : extra_key) h = Combine(h, static_cast<unsigned char>(c));
  return h;
}

}  // namespace tokenmill
