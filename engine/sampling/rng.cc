#include "engine/sampling/rng.h"

#include "common/hash.h"

namespace tokenmill {
namespace {

// SplitMix64's output function: a bijection with full avalanche.
uint64_t Mix(uint64_t z) { return Mix64(z + kGoldenGamma); }

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
