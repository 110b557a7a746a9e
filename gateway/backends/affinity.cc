#include "gateway/backends/affinity.h"

#include "common/hash.h"

namespace tokenmill::gateway {

uint64_t StableHash(std::string_view text) { return Fnv1a64(text); }

std::string AdapterAffinityKey(std::string_view adapter, std::string_view key) {
  if (key.empty()) return "";
  std::string salted = "lora:";
  salted += adapter;
  salted += '\0';
  salted += key;
  return salted;
}

int ChooseBackend(const std::vector<BackendCandidate>& candidates, std::string_view affinity_key,
                  int max_imbalance) {
  int least_loaded = -1;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    if (!candidates[i].eligible) continue;
    if (least_loaded < 0 || candidates[i].in_flight < candidates[least_loaded].in_flight) {
      least_loaded = i;
    }
  }
  if (least_loaded < 0 || affinity_key.empty()) return least_loaded;

  const uint64_t key_hash = StableHash(affinity_key);
  int winner = -1;
  uint64_t best = 0;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    if (!candidates[i].hashed) continue;
    const uint64_t weight = Mix64(key_hash ^ Mix64(StableHash(candidates[i].address)));
    if (winner < 0 || weight > best) {
      winner = i;
      best = weight;
    }
  }
  if (winner < 0 || !candidates[winner].eligible) return least_loaded;
  const BackendCandidate& chosen = candidates[winner];
  if (chosen.in_flight - candidates[least_loaded].in_flight > max_imbalance) return least_loaded;
  return winner;
}

}  // namespace tokenmill::gateway
