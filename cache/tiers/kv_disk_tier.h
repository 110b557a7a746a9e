// The disk tier below the KV block pool (--kv-cache-dir): full prefix blocks written through
// as they are cached, kept under a byte budget (LRU) and a TTL, found again by a later request
// or a restarted server, and never served unverified.
//
// A block on disk is named by its digest (block_digest.h): SHA-256 chained over the tier's
// identity (the model's tensor data, the KV format version and arithmetic, the device, KV
// types, block size, RoPE: everything that makes the bytes valid), the request's cache salt
// (the tenant) and every token up to the block's end. A file is served only when its header
// names the same identity and digest, its salt and tokens equal the request's and the
// SHA-256 over the whole file matches; a torn, truncated, corrupt, foreign or swapped file is
// counted, logged once, deleted and reported as a miss.
//
// Threads: the engine thread calls Write, Load, TakeFinishedLoads, TakeEvents and the
// lookups; none of them does file I/O or waits on it. A writer thread writes, evicts, purges
// and expires files (and scans the directory at start); a loader thread reads and verifies.
// A directory that cannot be used (read-only, full, missing and not creatable) turns the tier
// off with one warning, never failing a request: writes stop (a full disk is tried again
// after a pause), lookups miss.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/tiers/block_digest.h"
#include "cache/tiers/kv_tier_event.h"
#include "cache/types.h"

namespace tokenmill {

struct KvDiskTierConfig {
  std::string dir;            // created (0700) when missing; files 0600
  int64_t max_bytes = 0;      // the directory's budget, every identity's files counted
  std::chrono::seconds ttl{0};  // files unused (written or loaded) this long are deleted; 0: none
  // Everything besides salt and tokens that makes a block's bytes valid, as readable text
  // (kept beside the files for operators); its digest roots every chain and names the
  // subdirectory, so another model or KV type never sees these files.
  std::string identity;
  int64_t payload_bytes = 0;  // each block's KV bytes: a file of another size is refused
  int block_size = 0;         // tokens a block
  // Writes waiting for the writer thread may hold at most this many payload bytes; a write
  // past it is dropped (counted): the tier never slows the engine down.
  int64_t max_queued_write_bytes = int64_t{256} << 20;
};

// One block of a load: what the request expects the file to hold.
struct KvTierBlockRef {
  BlockDigest digest;
  std::vector<TokenId> tokens;  // block_size tokens
};

// A finished load: the payloads of the longest verified run of the requested blocks, from the
// first; shorter than asked when a block was missing, rejected or unreadable.
struct KvTierLoad {
  uint64_t ticket = 0;
  std::vector<std::vector<uint8_t>> payloads;
  double seconds = 0.0;  // from Load to finished
};

struct KvDiskTierStats {
  bool enabled = false;       // usable now (writes not paused)
  int64_t bytes = 0;          // of this identity's files
  int64_t blocks = 0;         // this identity's files
  int64_t other_bytes = 0;    // files of other identities (counted in the budget)
  int64_t writes = 0;         // blocks written
  int64_t write_failures = 0;
  int64_t dropped_writes = 0;  // queue full or tier off
  int64_t evictions = 0;      // deleted for the budget
  int64_t expirations = 0;    // deleted for the TTL
  int64_t purged = 0;         // deleted by Purge
  int64_t lookups = 0;        // blocks asked for by CountPresent
  int64_t hits = 0;           // of those, present
  int64_t loads = 0;          // blocks read and verified
  int64_t load_bytes = 0;
  double load_seconds = 0.0;  // summed over finished loads
  int64_t load_count = 0;     // finished loads
  int64_t rejects = 0;        // files refused (any reason below), each deleted
  int64_t rejects_corrupt = 0;     // checksum, magic, header
  int64_t rejects_truncated = 0;   // shorter or longer than its header says
  int64_t rejects_mismatch = 0;    // another digest, identity, salt or tokens than asked
  int64_t read_failures = 0;
};

class KvDiskTier {
 public:
  // Never fails: a directory it cannot use gives a tier that is off, with one warning.
  // `wake` is called (from the tier's threads) when a load finishes or a written block's event
  // waits for TakeEvents, so that a sleeping engine loop takes it.
  static std::unique_ptr<KvDiskTier> Open(KvDiskTierConfig config, std::function<void()> wake);
  // Stops the threads; queued writes are dropped (Flush first to keep them).
  ~KvDiskTier();
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  // The chain's root for this tier's identity (ChainBlockDigests's first argument).
  const BlockDigest& root() const;

  // How many of digests[first], digests[first + 1], ... are on disk, consecutively, by the
  // index alone (no I/O; a file may still be refused when loaded). Counts lookups and hits.
  int CountPresent(std::span<const BlockDigest> digests, int first);
  bool Contains(const BlockDigest& digest) const;

  // Queues a block to write; returns at once. Skipped when its digest is already on disk or
  // queued, dropped (counted) when the queue is full or the tier is off. `hash` and
  // `parent_hash` are the pool's (KvTierEvent); `salt` the request's cache salt.
  void Write(const BlockDigest& digest, BlockHash hash, std::optional<BlockHash> parent_hash,
             std::string_view salt, std::span<const TokenId> tokens, std::vector<uint8_t> payload);

  // Queues a load of consecutive blocks, each checked against its ref and `salt`; returns its
  // ticket (never 0). Its result comes out of TakeFinishedLoads.
  uint64_t Load(std::string salt, std::vector<KvTierBlockRef> blocks);
  // Drops a queued or running load's result (a cancelled request): it never comes out.
  void Cancel(uint64_t ticket);
  // The loads finished since the last call.
  std::vector<KvTierLoad> TakeFinishedLoads();

  // Deletes every block whose salt starts with salt_prefix (a tenant's: request_builder.h's
  // PrefixCacheSalt), of every identity; "" deletes all. Waits for the writer thread to do it
  // and returns how many files went.
  int64_t Purge(std::string_view salt_prefix);

  // Waits until every queued write is on disk, or the deadline.
  void Flush(std::chrono::steady_clock::time_point deadline);

  // The contents' changes since the last call: stored when a write lands or a file is found
  // at start, removed when one is deleted. Only this identity's files.
  std::vector<KvTierEvent> TakeEvents();

  KvDiskTierStats Stats() const;

 private:
  class Impl;
  explicit KvDiskTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenmill
