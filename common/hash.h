// Small non-cryptographic hashes, stable across runs and machines.
#pragma once

#include <cstdint>
#include <string_view>

namespace tokenmill {

// SplitMix64's finalizer (Steele, Lea, Flood 2014): a bijection in which every input bit
// affects every output bit.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The golden-ratio increment SplitMix64 adds before mixing.
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// FNV-1a over bytes.
inline uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace tokenmill
