// A counter-based RNG: each number is a pure function of (seed, sequence index, output
// position, stream), so a seeded request draws the same numbers alone or batched, before or
// after preemption, whatever the order of the rows in a step. No state to carry or restore.
#pragma once

#include <cstdint>

namespace tokenmill {

// Independent uniforms for the same row: the sampler's draw and speculative decoding's
// acceptance test and residual draw must not reuse one number.
enum class RngStream : uint32_t {
  kSample = 0,    // the token drawn from the processed distribution
  kAccept = 1,    // speculative decoding: u < p(x) / q(x)
  kResample = 2,  // speculative decoding: the draw from norm(max(0, p - q))
};

struct RngKey {
  uint64_t seed = 0;
  uint32_t sequence_index = 0;
  uint64_t position = 0;  // the output position (tokens generated before this one)
};

// 64 well-mixed bits (SplitMix64's finalizer chained over the key's fields).
uint64_t RandomBits(const RngKey& key, RngStream stream);

// Uniform in [0, 1) with 53 random bits.
double RandomUniform(const RngKey& key, RngStream stream);

}  // namespace tokenmill
