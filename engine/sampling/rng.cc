#include "engine/sampling/rng.h"

namespace tokenmill {
namespace {

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijection with full avalanche.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t RandomBits(const RngKey& key, RngStream stream) {
  uint64_t h = Mix(key.seed);
  h = Mix(h ^ key.sequence_index);
  h = Mix(h ^ key.position);
  return Mix(h ^ static_cast<uint64_t>(stream));
}

double RandomUniform(const RngKey& key, RngStream stream) {
  return static_cast<double>(RandomBits(key, stream) >> 11) * 0x1.0p-53;
}

}  // namespace tokenmill
