#include "cache/tiers/kv_host_tier.h"

#include <iterator>
#include <utility>

#include "common/check.h"

namespace tokenmill {

KvHostTier::KvHostTier(std::span<uint8_t> arena, int64_t payload_bytes)
    : arena_(arena), payload_bytes_(payload_bytes) {
  TM_CHECK_GT(payload_bytes, 0);
  const int64_t slots = static_cast<int64_t>(arena.size()) / payload_bytes;
  TM_CHECK_LE(slots, int64_t{1} << 30) << "a host tier of " << slots << " blocks";
  // Taken from the back: slot 0 first.
  for (int64_t slot = slots - 1; slot >= 0; --slot) free_slots_.push_back(static_cast<int>(slot));
  stats_.capacity_blocks = slots;
}

std::span<uint8_t> KvHostTier::Store(const BlockDigest& digest, BlockHash hash,
                                     std::optional<BlockHash> parent_hash, std::string_view salt,
                                     std::span<const TokenId> tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = entries_.find(digest); it != entries_.end()) {
    lru_.splice(lru_.end(), lru_, it->second);
    return {};
  }
  if (free_slots_.empty()) {
    if (lru_.empty()) return {};
    Drop(lru_.begin());
    ++stats_.evictions;
  }
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  lru_.push_back(Entry{.digest = digest, .hash = hash, .salt = std::string(salt), .slot = slot});
  entries_.emplace(digest, std::prev(lru_.end()));
  events_.push_back(KvTierEvent{.stored = true,
                                .hash = hash,
                                .parent_hash = parent_hash,
                                .tokens = std::vector<TokenId>(tokens.begin(), tokens.end())});
  ++stats_.stores;
  ++stats_.blocks;
  stats_.bytes += payload_bytes_;
  return arena_.subspan(static_cast<size_t>(slot * payload_bytes_),
                        static_cast<size_t>(payload_bytes_));
}

int KvHostTier::CountPresent(std::span<const BlockDigest> digests, int first) {
  std::lock_guard<std::mutex> lock(mutex_);
  int count = 0;
  for (size_t i = static_cast<size_t>(first); i < digests.size(); ++i) {
    ++stats_.lookups;
    if (!entries_.contains(digests[i])) break;
    ++stats_.hits;
    ++count;
  }
  return count;
}

std::span<const uint8_t> KvHostTier::Load(const BlockDigest& digest) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = entries_.find(digest);
  if (it == entries_.end()) return {};
  lru_.splice(lru_.end(), lru_, it->second);
  ++stats_.loads;
  stats_.load_bytes += payload_bytes_;
  return arena_.subspan(static_cast<size_t>(it->second->slot * payload_bytes_),
                        static_cast<size_t>(payload_bytes_));
}

void KvHostTier::Erase(const BlockDigest& digest) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = entries_.find(digest); it != entries_.end()) Drop(it->second);
}

int64_t KvHostTier::Purge(std::string_view salt_prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t purged = 0;
  for (auto it = lru_.begin(); it != lru_.end();) {
    const auto next = std::next(it);
    if (std::string_view(it->salt).starts_with(salt_prefix)) {
      Drop(it);
      ++purged;
    }
    it = next;
  }
  stats_.purged += purged;
  return purged;
}

void KvHostTier::Drop(std::list<Entry>::iterator entry) {
  events_.push_back(
      KvTierEvent{.stored = false, .hash = entry->hash, .parent_hash = {}, .tokens = {}});
  free_slots_.push_back(entry->slot);
  entries_.erase(entry->digest);
  lru_.erase(entry);
  --stats_.blocks;
  stats_.bytes -= payload_bytes_;
}

std::vector<KvTierEvent> KvHostTier::TakeEvents() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(events_, {});
}

KvHostTierStats KvHostTier::Stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace tokenmill
