#include "cache/block_hash.h"

namespace tokenmill {
namespace {

// splitmix64's finalizer: a bijection that spreads every input bit over the output.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t Combine(uint64_t seed, uint64_t value) {
  return Mix64(seed + 0x9e3779b97f4a7c15ULL + value);
}

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
