// The disk tier's writer thread: the scan at start, writes, the budget, the TTL and purges.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cache/tiers/kv_disk_tier_impl.h"

namespace tokenmill {

namespace {

constexpr auto kFullDiskPause = std::chrono::seconds(30);
// Another identity's temp file this old is a leftover; a younger one may be another server's
// write in flight (a writer's own identity's are all leftovers: one server writes them).
constexpr int64_t kForeignTempAgeNs = int64_t{60} * 1'000'000'000;

bool IsHex(std::string_view text, size_t size) {
  return text.size() == size && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

BlockDigest DigestFromHex(std::string_view hex) {
  BlockDigest digest{};
  const auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < digest.size(); ++i) {
    digest[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return digest;
}

}  // namespace

bool KvDiskTier::Impl::Stopping() const {
  std::lock_guard lock(mu_);
  return stop_;
}

std::string KvDiskTier::Impl::EntryPath(const BlockDigest& digest, uint32_t dir) const {
  const std::string hex = DigestHex(digest);
  return config_.dir + "/" + dir_names_[dir] + "/" + hex.substr(0, 2) + "/" + hex +
         std::string(tier_files::kBlockSuffix);
}

void KvDiskTier::Impl::WriterMain() {
  Scan();
  Expire();
  {
    std::lock_guard lock(mu_);
    scanned_ = true;
  }
  flushed_cv_.notify_all();
  const auto ttl = std::chrono::duration_cast<std::chrono::milliseconds>(config_.ttl);
  const auto interval = std::clamp<std::chrono::milliseconds>(
      ttl / 4, std::chrono::milliseconds(100), std::chrono::seconds(60));
  auto next_expiry = std::chrono::steady_clock::now() + interval;
  std::unique_lock lock(mu_);
  const auto ready = [&] { return stop_ || !purges_.empty() || !writes_.empty(); };
  while (true) {
    if (ttl.count() > 0) {
      writer_cv_.wait_until(lock, next_expiry, ready);
    } else {
      writer_cv_.wait(lock, ready);
    }
    if (stop_) break;
    if (!purges_.empty()) {
      PurgeJob job = std::move(purges_.front());
      purges_.pop_front();
      lock.unlock();
      job.done.set_value(DoPurge(job.prefix));
      lock.lock();
    } else if (ttl.count() > 0 && std::chrono::steady_clock::now() >= next_expiry) {
      lock.unlock();
      Expire();
      lock.lock();
      next_expiry = std::chrono::steady_clock::now() + interval;
    } else if (!writes_.empty()) {
      WriteJob job = std::move(writes_.front());
      writes_.pop_front();
      writing_ = true;
      const int64_t bytes = static_cast<int64_t>(job.payload.size());
      lock.unlock();
      DoWrite(job);
      lock.lock();
      writing_ = false;
      queued_.erase(job.digest);
      queued_bytes_ -= bytes;
      if (writes_.empty()) flushed_cv_.notify_all();
    }
  }
  // Stopping: queued writes are dropped, a waiting purge gets its answer.
  writes_.clear();
  queued_.clear();
  queued_bytes_ = 0;
  for (PurgeJob& job : purges_) job.done.set_value(0);
  purges_.clear();
}

void KvDiskTier::Impl::Scan() {
  if (!usable_) return;
  std::vector<tier_files::DirEntry> tops;
  if (tier_files::ListDir(config_.dir, &tops) != 0) return;
  std::vector<Found> found;
  for (const tier_files::DirEntry& top : tops) {
    // Only identity directories: the rest of DIR (a model's cached identity hash) is not ours.
    if (!top.is_dir || !IsHex(top.name, 32) || Stopping()) continue;
    uint32_t dir = 0;
    if (top.name != id_name_) {
      dir = static_cast<uint32_t>(dir_names_.size());
      dir_names_.push_back(top.name);
    }
    ScanIdentityDir(top.name, dir, &found);
  }
  // Oldest first, so that the index inserts each at its end.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.entry.last_use_ns < b.entry.last_use_ns;
  });
  std::lock_guard lock(mu_);
  for (Found& f : found) {
    if (f.entry.mine()) {
      events_.push_back(KvTierEvent{true, f.entry.hash, f.entry.parent_hash, std::move(f.tokens)});
    }
    index_.Insert(f.digest, std::move(f.entry));
  }
}

void KvDiskTier::Impl::ScanIdentityDir(const std::string& name, uint32_t dir,
                                       std::vector<Found>* found) {
  const std::string path = config_.dir + "/" + name;
  const int64_t old_temp = WallNowNs() - kForeignTempAgeNs;
  const auto leftover = [&](const tier_files::DirEntry& entry) {
    return entry.is_file && entry.name.ends_with(tier_files::kTempSuffix) &&
           (dir == 0 || entry.mtime_ns < old_temp);
  };
  std::vector<tier_files::DirEntry> entries;
  if (tier_files::ListDir(path, &entries) != 0) return;
  for (const tier_files::DirEntry& entry : entries) {
    if (leftover(entry)) tier_files::Remove(path + "/" + entry.name);  // a writer stopped
    if (!entry.is_dir || !IsHex(entry.name, 2) || Stopping()) continue;
    const std::string fan = path + "/" + entry.name;
    std::vector<tier_files::DirEntry> files;
    if (tier_files::ListDir(fan, &files) != 0) continue;
    for (const tier_files::DirEntry& file : files) {
      const std::string file_path = fan + "/" + file.name;
      if (file.name.ends_with(tier_files::kTempSuffix)) {
        if (leftover(file)) tier_files::Remove(file_path);
      } else if (file.is_file) {
        ScanFile(file_path, file, dir, found);
      }
    }
  }
}

void KvDiskTier::Impl::ScanFile(const std::string& path, const tier_files::DirEntry& file,
                                uint32_t dir, std::vector<Found>* found) {
  const std::string_view name = file.name;
  const std::string_view fan = std::string_view(path).substr(path.size() - name.size() - 3, 2);
  const std::string_view stem = name.substr(0, std::min(name.size(), size_t{64}));
  if (!name.ends_with(tier_files::kBlockSuffix) ||
      name.size() != 64 + tier_files::kBlockSuffix.size() || !IsHex(stem, 64) ||
      !stem.starts_with(fan)) {
    Reject(path, RejectReason::kCorrupt, "not a block file's name", nullptr);
    return;
  }
  tier_files::ReadFile reader;
  if (reader.Open(path) != 0) return;  // gone meanwhile, or unreadable: a load will tell
  std::vector<uint8_t> buffer;
  int error = 0;
  // Headers only: salt and tokens fit in 4 KiB for the usual block sizes.
  const BlockFileParse parse = ReadBlockFileHeader(reader, 4096, &buffer, &error);
  if (error != 0) return;
  if (parse.kind == BlockFileParse::Kind::kCorrupt) {
    Reject(path, RejectReason::kCorrupt, parse.why, nullptr);
    return;
  }
  const BlockFileHeader& header = parse.header;
  if (parse.kind == BlockFileParse::Kind::kNeedMore ||
      header.FileSize() != static_cast<uint64_t>(reader.size())) {
    Reject(path, RejectReason::kTruncated, "its size disagrees with its header", nullptr);
    return;
  }
  const BlockDigest digest = DigestFromHex(stem);
  if (header.digest != digest || DigestHex(header.identity).substr(0, 32) != dir_names_[dir] ||
      (dir == 0 && header.identity != root_)) {
    Reject(path, RejectReason::kMismatch, "another block's or identity's file", nullptr);
    return;
  }
  if (dir == 0 && (header.tokens.size() != static_cast<size_t>(config_.block_size) ||
                   header.payload_size != static_cast<uint64_t>(config_.payload_bytes))) {
    Reject(path, RejectReason::kCorrupt, "block or payload size", nullptr);
    return;
  }
  Found f{digest,
          DiskIndexEntry{reader.size(), file.mtime_ns, header.salt, header.hash, header.parent_hash,
                         dir},
          {}};
  if (dir == 0) f.tokens = header.tokens;
  found->push_back(std::move(f));
}

void KvDiskTier::Impl::DoWrite(WriteJob& job) {
  {
    std::lock_guard lock(mu_);
    if (index_.Find(job.digest) != nullptr) return;  // found by the scan meanwhile
    if (!WritesAllowedLocked(std::chrono::steady_clock::now())) {
      ++stats_.dropped_writes;
      return;
    }
  }
  BlockFileHeader header{root_,    job.digest, job.hash,           job.parent_hash,
                         job.salt, job.tokens, job.payload.size(), 0};
  const std::vector<uint8_t> head = EncodeBlockFileHeader(header);
  const BlockDigest checksum = BlockFileChecksum(head, job.payload);
  const int64_t size = static_cast<int64_t>(header.FileSize());
  if (size > config_.max_bytes) {
    std::lock_guard lock(mu_);
    ++stats_.dropped_writes;
    return;
  }
  EvictUntil(size, config_.max_bytes);
  const std::string hex = DigestHex(job.digest);
  const std::string fan = id_dir_ + "/" + hex.substr(0, 2);
  const std::string temp = hex + "." + std::to_string(temp_nonce_) + "-" +
                           std::to_string(++temp_counter_) + std::string(tier_files::kTempSuffix);
  const std::string name = hex + std::string(tier_files::kBlockSuffix);
  const std::span<const uint8_t> pieces[] = {head, job.payload, checksum};
  const auto attempt = [&] {
    // Made again each time: an operator may have emptied the directory.
    const int error = tier_files::MakeDirs(fan);
    return error != 0 ? error : tier_files::WriteFileAtomically(fan, temp, name, pieces);
  };
  int error = attempt();
  if (error == ENOSPC || error == EDQUOT || error == EFBIG) {
    // The disk is fuller than the budget thought (other files share it): free this block's
    // bytes more from the least recently used, and try once more.
    int64_t total = 0;
    {
      std::lock_guard lock(mu_);
      total = index_.total_bytes();
    }
    EvictUntil(size, total);
    error = attempt();
  }
  if (error != 0) {
    HandleWriteError(error, fan + "/" + name);
    return;
  }
  bool first_event = false;
  {
    std::lock_guard lock(mu_);
    index_.Insert(job.digest, DiskIndexEntry{size, WallNowNs(), std::move(job.salt), job.hash,
                                             job.parent_hash, 0});
    ++stats_.writes;
    events_.push_back(KvTierEvent{true, job.hash, job.parent_hash, std::move(job.tokens)});
    first_event = events_.size() == 1;
  }
  // An idle engine publishes the change now, not with its next request's step.
  if (first_event && wake_) wake_();
}

void KvDiskTier::Impl::HandleWriteError(int error, const std::string& path) {
  std::lock_guard lock(mu_);
  ++stats_.write_failures;
  if (error == EROFS || error == EACCES || error == EPERM) {
    if (!writes_off_) {
      spdlog::warn("KV disk tier: cannot write {} ({}): no more writes; loads go on", path,
                   std::strerror(error));
    }
    writes_off_ = true;
  } else if (error == ENOENT) {
    // Our temp file went under us (another server's start on the same directory): a miss.
    spdlog::debug("KV disk tier: {} vanished while written", path);
  } else {
    spdlog::warn("KV disk tier: cannot write {} ({}): writes paused for {} s", path,
                 std::strerror(error), kFullDiskPause.count());
    paused_until_ = std::chrono::steady_clock::now() + kFullDiskPause;
  }
}

void KvDiskTier::Impl::EvictUntil(int64_t incoming, int64_t limit) {
  std::vector<std::string> paths;
  {
    std::lock_guard lock(mu_);
    while (!index_.empty() && index_.total_bytes() + incoming > limit) {
      const BlockDigest digest = index_.Oldest();
      const DiskIndexEntry entry = *index_.Erase(digest);
      paths.push_back(EntryPath(digest, entry.dir));
      ++stats_.evictions;
      if (entry.mine()) events_.push_back(KvTierEvent{false, entry.hash, {}, {}});
    }
  }
  for (const std::string& path : paths) tier_files::Remove(path);
}

void KvDiskTier::Impl::Expire() {
  if (config_.ttl.count() <= 0) return;
  const int64_t cutoff =
      WallNowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(config_.ttl).count();
  std::vector<BlockDigest> expired;
  {
    std::lock_guard lock(mu_);
    expired = index_.UsedBefore(cutoff);
  }
  DeleteEntries(expired, &KvDiskTierStats::expirations);
}

int64_t KvDiskTier::Impl::DoPurge(const std::string& prefix) {
  std::vector<BlockDigest> digests;
  {
    std::lock_guard lock(mu_);
    digests = index_.WithSaltPrefix(prefix);
    // A tenant's queued blocks go too: none of them lands after its purge.
    std::erase_if(writes_, [&](const WriteJob& job) {
      if (!job.salt.starts_with(prefix)) return false;
      queued_.erase(job.digest);
      queued_bytes_ -= static_cast<int64_t>(job.payload.size());
      return true;
    });
    if (writes_.empty()) flushed_cv_.notify_all();
  }
  return DeleteEntries(digests, &KvDiskTierStats::purged);
}

int64_t KvDiskTier::Impl::DeleteEntries(const std::vector<BlockDigest>& digests,
                                        int64_t KvDiskTierStats::*counter) {
  std::vector<std::string> paths;
  {
    std::lock_guard lock(mu_);
    for (const BlockDigest& digest : digests) {
      const std::optional<DiskIndexEntry> entry = index_.Erase(digest);
      if (!entry) continue;
      ++(stats_.*counter);
      if (entry->mine()) events_.push_back(KvTierEvent{false, entry->hash, {}, {}});
      paths.push_back(EntryPath(digest, entry->dir));
    }
  }
  for (const std::string& path : paths) tier_files::Remove(path);
  return static_cast<int64_t>(paths.size());
}

}  // namespace tokenmill
