// Which backend serves a request: rendezvous (highest random weight) hashing of the request's
// affinity key over the backends, so requests that share a prefix meet the same prefix cache
// and adding or losing a backend moves only its share; the least-loaded healthy backend when
// the chosen one is unhealthy or too busy. Pure functions: the pool supplies the state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokenmill::gateway {

struct BackendCandidate {
  std::string_view address;  // host:port, what the hash weighs
  bool eligible = false;     // healthy and serving the requested model
  // False: ready, but serving another model (or not the adapter): out of the hash, so that
  // the key's winner among those that serve it keeps the key.
  bool hashed = true;
  int in_flight = 0;
};

// FNV-1a, 64 bits: stable across runs and machines (std::hash is neither).
uint64_t StableHash(std::string_view text);

// The key of a request that names a LoRA adapter: the server caches its prefixes apart from
// the base model's and every other adapter's, so its prompts hash apart. Empty for an empty key.
std::string AdapterAffinityKey(std::string_view adapter, std::string_view key);

// The candidate to use, or -1 when none is eligible. The rendezvous winner among the hashed
// candidates is used when it is eligible and has at most `max_imbalance` more requests in
// flight than the least-loaded eligible one; otherwise the least-loaded eligible one (the
// first of equals). An empty key has no affinity: least-loaded.
int ChooseBackend(const std::vector<BackendCandidate>& candidates, std::string_view affinity_key,
                  int max_imbalance);

}  // namespace tokenmill::gateway
