#include "cache/tiers/disk_index.h"

#include <utility>

namespace tokenmill {

const DiskIndexEntry* DiskIndex::Find(const BlockDigest& digest) const {
  const auto it = entries_.find(digest);
  return it == entries_.end() ? nullptr : &it->second.entry;
}

bool DiskIndex::ContainsMine(const BlockDigest& digest) const {
  const DiskIndexEntry* entry = Find(digest);
  return entry != nullptr && entry->mine();
}

void DiskIndex::Account(const DiskIndexEntry& entry, int sign) {
  if (entry.mine()) {
    mine_bytes_ += sign * entry.size;
    mine_blocks_ += sign;
  } else {
    other_bytes_ += sign * entry.size;
  }
}

void DiskIndex::Insert(const BlockDigest& digest, DiskIndexEntry entry) {
  Erase(digest);
  // Walk back from the newest: entries mostly arrive in order (writes now, a scan sorted).
  auto position = lru_.end();
  while (position != lru_.begin()) {
    const auto before = std::prev(position);
    if (entries_.at(*before).entry.last_use_ns <= entry.last_use_ns) break;
    position = before;
  }
  Account(entry, +1);
  const auto it = lru_.insert(position, digest);
  entries_.emplace(digest, Slot{std::move(entry), it});
}

void DiskIndex::Touch(const BlockDigest& digest, int64_t now_ns) {
  const auto it = entries_.find(digest);
  if (it == entries_.end()) return;
  it->second.entry.last_use_ns = now_ns;
  lru_.splice(lru_.end(), lru_, it->second.position);
}

std::optional<DiskIndexEntry> DiskIndex::Erase(const BlockDigest& digest) {
  const auto it = entries_.find(digest);
  if (it == entries_.end()) return std::nullopt;
  DiskIndexEntry entry = std::move(it->second.entry);
  lru_.erase(it->second.position);
  entries_.erase(it);
  Account(entry, -1);
  return entry;
}

std::vector<BlockDigest> DiskIndex::UsedBefore(int64_t cutoff_ns) const {
  std::vector<BlockDigest> out;
  for (const BlockDigest& digest : lru_) {
    if (entries_.at(digest).entry.last_use_ns >= cutoff_ns) break;
    out.push_back(digest);
  }
  return out;
}

std::vector<BlockDigest> DiskIndex::WithSaltPrefix(std::string_view prefix) const {
  std::vector<BlockDigest> out;
  for (const auto& [digest, slot] : entries_) {
    if (std::string_view(slot.entry.salt).starts_with(prefix)) out.push_back(digest);
  }
  return out;
}

}  // namespace tokenmill
