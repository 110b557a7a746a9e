// The disk tier's index of the files in its directory, every identity's: digest -> what the
// budget, the TTL, purges and lookups need, in least-recently-used order. Not thread-safe:
// the tier guards it with its mutex. Holds no tokens (a header keeps them on disk).
#pragma once

#include <cstdint>
#include <cstring>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/tiers/block_digest.h"
#include "cache/types.h"

namespace tokenmill {

struct DigestHasher {
  size_t operator()(const BlockDigest& digest) const {
    size_t value = 0;  // a SHA-256 is uniform: its first bytes are a fine hash
    std::memcpy(&value, digest.data(), sizeof(value));
    return value;
  }
};

struct DiskIndexEntry {
  int64_t size = 0;         // the file's bytes
  int64_t last_use_ns = 0;  // wall clock (files' mtimes are), written or loaded
  std::string salt;
  BlockHash hash = 0;
  std::optional<BlockHash> parent_hash;
  uint32_t dir = 0;         // which identity's directory (the tier's names); 0: this tier's
  bool mine() const { return dir == 0; }
};

class DiskIndex {
 public:
  const DiskIndexEntry* Find(const BlockDigest& digest) const;
  bool ContainsMine(const BlockDigest& digest) const;
  // Adds (or replaces) an entry, placed by its last use among the others.
  void Insert(const BlockDigest& digest, DiskIndexEntry entry);
  // Marks a use now: the entry becomes the most recently used.
  void Touch(const BlockDigest& digest, int64_t now_ns);
  std::optional<DiskIndexEntry> Erase(const BlockDigest& digest);

  bool empty() const { return entries_.empty(); }
  // The least recently used entry's digest; the index must not be empty.
  const BlockDigest& Oldest() const { return lru_.front(); }
  // Digests last used before `cutoff_ns`, oldest first.
  std::vector<BlockDigest> UsedBefore(int64_t cutoff_ns) const;
  // Digests whose salt starts with the prefix.
  std::vector<BlockDigest> WithSaltPrefix(std::string_view prefix) const;

  int64_t total_bytes() const { return mine_bytes_ + other_bytes_; }
  int64_t mine_bytes() const { return mine_bytes_; }
  int64_t mine_blocks() const { return mine_blocks_; }
  int64_t other_bytes() const { return other_bytes_; }

 private:
  struct Slot {
    DiskIndexEntry entry;
    std::list<BlockDigest>::iterator position;
  };
  void Account(const DiskIndexEntry& entry, int sign);

  std::unordered_map<BlockDigest, Slot, DigestHasher> entries_;
  std::list<BlockDigest> lru_;  // front: least recently used
  int64_t mine_bytes_ = 0;
  int64_t mine_blocks_ = 0;
  int64_t other_bytes_ = 0;
};

}  // namespace tokenmill
