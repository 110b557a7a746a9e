// The host-memory tier between the block pool and the disk (--kv-cache-host-size): copies of
// full prefix blocks in slots of one arena the caller owns (page-locked memory on CUDA, so that
// copies to and from the device run at full speed and asynchronously), kept LRU by block digest
// (block_digest.h, the disk tier's names). The engine fills a slot when the pool caches a block
// and reads it back into the pool when a request's prefix continues here; it never waits on
// I/O, so the tier has no thread of its own. Thread-safe (one mutex): the engine thread uses
// it, Purge and Stats may come from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/tiers/block_digest.h"
#include "cache/tiers/disk_index.h"
#include "cache/tiers/kv_tier_event.h"
#include "cache/types.h"

namespace tokenmill {

struct KvHostTierStats {
  int64_t capacity_blocks = 0;  // slots in the arena
  int64_t blocks = 0;           // of them, holding a block
  int64_t bytes = 0;            // blocks x payload bytes
  int64_t stores = 0;           // blocks copied in
  int64_t evictions = 0;        // blocks that made room for newer ones
  int64_t purged = 0;           // removed by Purge
  int64_t lookups = 0;          // blocks asked for by CountPresent
  int64_t hits = 0;             // of those, present
  int64_t loads = 0;            // blocks read back into the pool
  int64_t load_bytes = 0;
};

class KvHostTier {
 public:
  // arena.size() / payload_bytes slots (none: every Store is skipped).
  KvHostTier(std::span<uint8_t> arena, int64_t payload_bytes);
  KvHostTier(const KvHostTier&) = delete;
  KvHostTier& operator=(const KvHostTier&) = delete;

  // The slot the caller copies a block's bytes into before anything reads them: a free one, or
  // the least recently used block's (it leaves the tier). Empty, changing nothing, when the
  // block is here already (it becomes the most recently used) or the tier has no slot.
  // `hash` and `parent_hash` are the pool's (KvTierEvent); `salt` the request's cache salt.
  std::span<uint8_t> Store(const BlockDigest& digest, BlockHash hash,
                           std::optional<BlockHash> parent_hash, std::string_view salt,
                           std::span<const TokenId> tokens);
  // How many of digests[first], digests[first + 1], ... are here, consecutively. Counts
  // lookups and hits.
  int CountPresent(std::span<const BlockDigest> digests, int first);
  // The block's bytes (it becomes the most recently used), or empty when it is not here.
  // Counts a load. Valid until the next Store or Purge.
  std::span<const uint8_t> Load(const BlockDigest& digest);

  // Drops the block, if here (a copy into its slot failed).
  void Erase(const BlockDigest& digest);
  // Drops every block whose salt starts with salt_prefix ("" : all); returns how many.
  int64_t Purge(std::string_view salt_prefix);
  // The contents' changes since the last call.
  std::vector<KvTierEvent> TakeEvents();
  KvHostTierStats Stats() const;

 private:
  struct Entry {
    BlockDigest digest{};
    BlockHash hash = 0;
    std::string salt;
    int slot = 0;
  };
  void Drop(std::list<Entry>::iterator entry);  // its slot goes free; a removed event

  mutable std::mutex mutex_;
  const std::span<uint8_t> arena_;
  const int64_t payload_bytes_;
  std::list<Entry> lru_;  // least recently used first
  std::unordered_map<BlockDigest, std::list<Entry>::iterator, DigestHasher> entries_;
  std::vector<int> free_slots_;
  std::vector<KvTierEvent> events_;
  KvHostTierStats stats_;
};

}  // namespace tokenmill
