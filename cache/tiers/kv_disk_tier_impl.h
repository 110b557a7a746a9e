// KvDiskTier's insides, shared by kv_disk_tier.cc (the engine's calls), kv_disk_tier_writer.cc
// (the writer thread: scan, write, evict, expire, purge) and kv_disk_tier_loader.cc (the
// loader thread: read and verify). One mutex guards everything both threads and the engine
// share; no file I/O ever happens under it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "cache/tiers/block_file.h"
#include "cache/tiers/disk_index.h"
#include "cache/tiers/kv_disk_tier.h"
#include "cache/tiers/tier_files.h"

namespace tokenmill {

// Reads a block file's header, reading more of the file when the header says it is longer
// than `first_read` bytes. kNeedMore: the file ends inside its header. `buffer` keeps what was
// read. Sets *error (and returns kCorrupt) when a read fails.
BlockFileParse ReadBlockFileHeader(const tier_files::ReadFile& file, size_t first_read,
                                   std::vector<uint8_t>* buffer, int* error);

// Why a file was refused (each deleted, counted under its stat).
enum class RejectReason { kCorrupt, kTruncated, kMismatch };

class KvDiskTier::Impl {
 public:
  Impl(KvDiskTierConfig config, std::function<void()> wake);
  ~Impl();
  // Makes the directory usable (or the tier off) and starts the threads.
  void Start();

  const BlockDigest& root() const { return root_; }
  int CountPresent(std::span<const BlockDigest> digests, int first);
  bool Contains(const BlockDigest& digest) const;
  void Write(const BlockDigest& digest, BlockHash hash, std::optional<BlockHash> parent_hash,
             std::string_view salt, std::span<const TokenId> tokens, std::vector<uint8_t> payload);
  uint64_t Load(std::string salt, std::vector<KvTierBlockRef> blocks);
  void Cancel(uint64_t ticket);
  std::vector<KvTierLoad> TakeFinishedLoads();
  int64_t Purge(std::string_view salt_prefix);
  void Flush(std::chrono::steady_clock::time_point deadline);
  std::vector<KvTierEvent> TakeEvents();
  KvDiskTierStats Stats() const;

 private:
  struct WriteJob {
    BlockDigest digest;
    BlockHash hash = 0;
    std::optional<BlockHash> parent_hash;
    std::string salt;
    std::vector<TokenId> tokens;
    std::vector<uint8_t> payload;
  };
  struct LoadJob {
    uint64_t ticket = 0;
    std::string salt;
    std::vector<KvTierBlockRef> blocks;
    std::chrono::steady_clock::time_point start;
  };
  struct PurgeJob {
    std::string prefix;
    std::promise<int64_t> done;
  };

  // A file found by the scan at start.
  struct Found {
    BlockDigest digest;
    DiskIndexEntry entry;
    std::vector<TokenId> tokens;  // this identity's (for its stored event)
  };

  // Writer thread (kv_disk_tier_writer.cc).
  void WriterMain();
  void Scan();
  void ScanIdentityDir(const std::string& name, uint32_t dir, std::vector<Found>* found);
  // Indexes one file of a fan-out directory, or refuses it.
  void ScanFile(const std::string& path, const tier_files::DirEntry& file, uint32_t dir,
                std::vector<Found>* found);
  void DoWrite(WriteJob& job);
  // Deletes least recently used files until `incoming` more bytes fit in `limit`.
  void EvictUntil(int64_t incoming, int64_t limit);
  void Expire();
  int64_t DoPurge(const std::string& prefix);
  // Drops index entries (counting them under `counter`) and deletes their files.
  int64_t DeleteEntries(const std::vector<BlockDigest>& digests,
                        int64_t KvDiskTierStats::*counter);
  void HandleWriteError(int error, const std::string& path);
  std::string EntryPath(const BlockDigest& digest, uint32_t dir) const;

  // Loader thread (kv_disk_tier_loader.cc).
  void LoaderMain();
  // Reads and verifies one block of a load; its payload, or false (missing or refused).
  bool LoadBlock(const std::string& salt, const KvTierBlockRef& ref, std::vector<uint8_t>* payload);

  // Either thread: deletes a refused file, counts and logs it, drops its index entry.
  void Reject(const std::string& path, RejectReason reason, const std::string& why,
              const BlockDigest* digest);
  bool Stopping() const;
  bool WritesAllowedLocked(std::chrono::steady_clock::time_point now) const;
  static int64_t WallNowNs();
  // This identity's file of the block `digest`.
  std::string BlockPath(const BlockDigest& digest) const;

  const KvDiskTierConfig config_;
  const std::function<void()> wake_;
  const BlockDigest root_;
  const std::string id_name_;  // first 32 hex of root_: this identity's subdirectory
  const std::string id_dir_;
  bool usable_ = false;        // set by Start before the threads run

  // The writer thread's own: identity directory names (index entries' `dir`), temp names.
  std::vector<std::string> dir_names_;
  uint64_t temp_nonce_ = 0;
  uint64_t temp_counter_ = 0;

  mutable std::mutex mu_;
  std::condition_variable writer_cv_;
  std::condition_variable loader_cv_;
  std::condition_variable flushed_cv_;
  bool stop_ = false;
  DiskIndex index_;
  std::deque<WriteJob> writes_;
  std::unordered_set<BlockDigest, DigestHasher> queued_;  // queued or being written
  int64_t queued_bytes_ = 0;
  bool writing_ = false;
  bool scanned_ = false;  // the scan at start is done (Flush waits for it too)
  bool writes_off_ = false;  // read-only or not permitted: for good
  std::chrono::steady_clock::time_point paused_until_{};  // a full disk: tried again after
  std::deque<PurgeJob> purges_;
  std::deque<LoadJob> loads_;
  uint64_t next_ticket_ = 1;
  uint64_t running_ticket_ = 0;
  bool running_cancelled_ = false;
  std::vector<KvTierLoad> finished_;
  std::vector<KvTierEvent> events_;
  KvDiskTierStats stats_;  // counters; sizes come from index_

  std::thread writer_;
  std::thread loader_;
};

}  // namespace tokenmill
