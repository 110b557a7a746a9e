// The disk tier's loader thread: reads a load's block files in order and serves each only
// when every byte of it is what the request expects.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cache/tiers/kv_disk_tier_impl.h"

namespace tokenmill {

BlockFileParse ReadBlockFileHeader(const tier_files::ReadFile& file, size_t first_read,
                                   std::vector<uint8_t>* buffer, int* error) {
  const auto file_size = static_cast<size_t>(std::max<int64_t>(file.size(), 0));
  size_t want = std::min(file_size, first_read);
  BlockFileParse parse;
  // At most three rounds: the fixed part, then the salt, then the tokens.
  for (int round = 0; round < 4; ++round) {
    *error = file.ReadPrefix(want, buffer);
    if (*error != 0) {
      parse.kind = BlockFileParse::Kind::kCorrupt;
      parse.why = std::strerror(*error);
      return parse;
    }
    parse = ParseBlockFileHeader(*buffer);
    if (parse.kind != BlockFileParse::Kind::kNeedMore || buffer->size() >= file_size ||
        parse.needed <= buffer->size()) {
      return parse;
    }
    want = std::min(file_size, parse.needed);
  }
  return parse;
}

void KvDiskTier::Impl::LoaderMain() {
  std::unique_lock lock(mu_);
  while (true) {
    loader_cv_.wait(lock, [&] { return stop_ || !loads_.empty(); });
    if (stop_) return;
    LoadJob job = std::move(loads_.front());
    loads_.pop_front();
    running_ticket_ = job.ticket;
    running_cancelled_ = false;
    lock.unlock();
    KvTierLoad load;
    load.ticket = job.ticket;
    // The disk reads every file of the load at once, not one after another as they are
    // verified (a load of a few hundred blocks: the difference between the device's queue
    // depth and one).
    for (const KvTierBlockRef& ref : job.blocks) tier_files::Prefetch(BlockPath(ref.digest));
    for (const KvTierBlockRef& ref : job.blocks) {
      if (Stopping()) break;
      std::vector<uint8_t> payload;
      if (!LoadBlock(job.salt, ref, &payload)) break;
      load.payloads.push_back(std::move(payload));
      lock.lock();
      const bool cancelled = running_cancelled_;
      lock.unlock();
      if (cancelled) break;
    }
    load.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - job.start).count();
    lock.lock();
    running_ticket_ = 0;
    if (running_cancelled_ || stop_) continue;
    stats_.load_seconds += load.seconds;
    ++stats_.load_count;
    finished_.push_back(std::move(load));
    lock.unlock();
    if (wake_) wake_();
    lock.lock();
  }
}

bool KvDiskTier::Impl::LoadBlock(const std::string& salt, const KvTierBlockRef& ref,
                                 std::vector<uint8_t>* payload) {
  const std::string path = BlockPath(ref.digest);
  tier_files::ReadFile file;
  const int open_error = file.Open(path);
  if (open_error == ENOENT || open_error == ENOTDIR) {
    // Gone (deleted by hand, or the directory emptied): the index forgets it too.
    std::lock_guard lock(mu_);
    const std::optional<DiskIndexEntry> entry = index_.Erase(ref.digest);
    if (entry) events_.push_back(KvTierEvent{false, entry->hash, {}, {}});
    return false;
  }
  if (open_error == ELOOP) {
    Reject(path, RejectReason::kCorrupt, "a symbolic link", &ref.digest);
    return false;
  }
  if (open_error != 0 || !file.regular()) {
    spdlog::warn("KV disk tier: cannot read {} ({})", path,
                 open_error != 0 ? std::strerror(open_error) : "not a regular file");
    std::lock_guard lock(mu_);
    ++stats_.read_failures;
    return false;
  }
  // The size a file of this block must have; no more than that is ever read.
  const size_t expected = kBlockFileFixedSize + salt.size() + 4 +
                          4 * static_cast<size_t>(config_.block_size) + 8 +
                          static_cast<size_t>(config_.payload_bytes) + kBlockFileChecksumSize;
  std::vector<uint8_t> bytes;
  int error = 0;
  const BlockFileParse parse = ReadBlockFileHeader(file, expected, &bytes, &error);
  if (error != 0) {
    spdlog::warn("KV disk tier: cannot read {} ({})", path, std::strerror(error));
    std::lock_guard lock(mu_);
    ++stats_.read_failures;
    return false;
  }
  if (parse.kind == BlockFileParse::Kind::kCorrupt) {
    Reject(path, RejectReason::kCorrupt, parse.why, &ref.digest);
    return false;
  }
  const BlockFileHeader& header = parse.header;
  if (parse.kind == BlockFileParse::Kind::kNeedMore ||
      header.FileSize() != static_cast<uint64_t>(file.size())) {
    Reject(path, RejectReason::kTruncated, "its size disagrees with its header", &ref.digest);
    return false;
  }
  const bool same_block = header.identity == root_ && header.digest == ref.digest &&
                          header.salt == salt &&
                          std::ranges::equal(header.tokens, ref.tokens);
  if (header.FileSize() != expected) {
    // Whole, but not the shape of this block (the checksum would need bytes not worth reading).
    Reject(path, same_block ? RejectReason::kCorrupt : RejectReason::kMismatch,
           "another block's size", &ref.digest);
    return false;
  }
  if (bytes.size() != expected && (error = file.ReadPrefix(expected, &bytes)) != 0) {
    spdlog::warn("KV disk tier: cannot read {} ({})", path, std::strerror(error));
    std::lock_guard lock(mu_);
    ++stats_.read_failures;
    return false;
  }
  if (bytes.size() != expected) {
    Reject(path, RejectReason::kTruncated, "shorter than its size", &ref.digest);
    return false;
  }
  if (!BlockFileChecksumMatches(bytes)) {
    Reject(path, RejectReason::kCorrupt, "checksum", &ref.digest);
    return false;
  }
  if (!same_block) {
    Reject(path, RejectReason::kMismatch, "another identity's, block's, salt's or tokens'",
           &ref.digest);
    return false;
  }
  payload->assign(bytes.begin() + static_cast<std::ptrdiff_t>(header.header_size),
                  bytes.end() - static_cast<std::ptrdiff_t>(kBlockFileChecksumSize));
  file.Touch();  // the use outlives a restart: the scan takes mtime as last use
  const int64_t now = WallNowNs();
  std::lock_guard lock(mu_);
  if (index_.ContainsMine(ref.digest)) {
    index_.Touch(ref.digest, now);
  } else {
    // A valid file the index did not know (the scan still running): it knows it now.
    index_.Insert(ref.digest, DiskIndexEntry{file.size(), now, header.salt, header.hash,
                                             header.parent_hash, 0});
    events_.push_back(KvTierEvent{true, header.hash, header.parent_hash, header.tokens});
  }
  ++stats_.loads;
  stats_.load_bytes += static_cast<int64_t>(payload->size());
  return true;
}

}  // namespace tokenmill
