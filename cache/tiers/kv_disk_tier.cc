#include "cache/tiers/kv_disk_tier.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "cache/tiers/kv_disk_tier_impl.h"
#include "cache/tiers/tier_files.h"

namespace tokenmill {
namespace {

// The writer thread's nice value: about a tenth of a busy core's share of the CPU.
constexpr int kWriterNice = 10;

std::string Trimmed(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

KvDiskTier::Impl::Impl(KvDiskTierConfig config, std::function<void()> wake)
    : config_([&] {
        config.dir = Trimmed(std::move(config.dir));
        return std::move(config);
      }()),
      wake_(std::move(wake)),
      root_(IdentityDigest(config_.identity)),
      id_name_(DigestHex(root_).substr(0, 32)),
      id_dir_(config_.dir + "/" + id_name_),
      dir_names_{id_name_} {}

void KvDiskTier::Impl::Start() {
  temp_nonce_ = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  std::string why;
  if (config_.dir.empty() || config_.block_size <= 0 || config_.payload_bytes <= 0 ||
      static_cast<size_t>(config_.block_size) > kBlockFileMaxTokens) {
    why = "no directory, block size or payload size";
  } else if (const int error = tier_files::MakeDirs(id_dir_); error != 0) {
    why = std::strerror(error);
  } else {
    // The identity beside the files, for operators; writing it also proves the directory
    // takes writes.
    const std::string text = config_.identity + "\n";
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()),
                                         text.size());
    const std::span<const uint8_t> pieces[] = {bytes};
    // Tried again when the temp file vanished: a server of the same identity starting
    // beside this one deletes what looks like a leftover.
    int write_error = ENOENT;
    for (int attempt = 0; attempt < 3 && write_error == ENOENT; ++attempt) {
      write_error = tier_files::WriteFileAtomically(
          id_dir_, "identity." + std::to_string(temp_nonce_) + std::string(tier_files::kTempSuffix),
          "identity", pieces);
    }
    if (write_error != 0) why = std::strerror(write_error);
  }
  usable_ = why.empty();
  if (!usable_) {
    spdlog::warn("KV disk tier off: {} cannot be used ({}); requests run without it", config_.dir,
                 why);
  }
  // Named for operators' tools (top -H, /proc/PID/task/*/comm).
  writer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "kv-disk-writer");
    // Background work: where the cores are busy with forward passes it takes what they leave
    // (Linux's nice is per thread), so the tier costs serving little; a queue it cannot keep
    // up with drops writes (counted), never requests.
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kWriterNice);
    WriterMain();
  });
  loader_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "kv-disk-loader");
    LoaderMain();
  });
}

KvDiskTier::Impl::~Impl() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  writer_cv_.notify_all();
  loader_cv_.notify_all();
  flushed_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (loader_.joinable()) loader_.join();
}

int64_t KvDiskTier::Impl::WallNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool KvDiskTier::Impl::WritesAllowedLocked(std::chrono::steady_clock::time_point now) const {
  return usable_ && !writes_off_ && now >= paused_until_;
}

int KvDiskTier::Impl::CountPresent(std::span<const BlockDigest> digests, int first) {
  std::lock_guard lock(mu_);
  int count = 0;
  for (size_t i = static_cast<size_t>(std::max(first, 0)); i < digests.size(); ++i) {
    if (!index_.ContainsMine(digests[i])) break;
    ++count;
  }
  stats_.lookups += std::max<int64_t>(0, static_cast<int64_t>(digests.size()) - first);
  stats_.hits += count;
  return count;
}

bool KvDiskTier::Impl::Contains(const BlockDigest& digest) const {
  std::lock_guard lock(mu_);
  return index_.ContainsMine(digest);
}

void KvDiskTier::Impl::Write(const BlockDigest& digest, BlockHash hash,
                             std::optional<BlockHash> parent_hash, std::string_view salt,
                             std::span<const TokenId> tokens, std::vector<uint8_t> payload) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  if (index_.ContainsMine(digest) || queued_.contains(digest)) return;
  const int64_t bytes = static_cast<int64_t>(payload.size());
  // A block this tier could never serve back is not worth the disk.
  const bool servable = tokens.size() == static_cast<size_t>(config_.block_size) &&
                        bytes == config_.payload_bytes && salt.size() <= kBlockFileMaxSalt;
  if (!servable || !WritesAllowedLocked(now) ||
      queued_bytes_ + bytes > config_.max_queued_write_bytes) {
    ++stats_.dropped_writes;
    return;
  }
  queued_.insert(digest);
  queued_bytes_ += bytes;
  writes_.push_back(WriteJob{digest, hash, parent_hash, std::string(salt),
                             std::vector<TokenId>(tokens.begin(), tokens.end()),
                             std::move(payload)});
  writer_cv_.notify_one();
}

uint64_t KvDiskTier::Impl::Load(std::string salt, std::vector<KvTierBlockRef> blocks) {
  std::lock_guard lock(mu_);
  const uint64_t ticket = next_ticket_++;
  loads_.push_back(
      LoadJob{ticket, std::move(salt), std::move(blocks), std::chrono::steady_clock::now()});
  loader_cv_.notify_one();
  return ticket;
}

void KvDiskTier::Impl::Cancel(uint64_t ticket) {
  std::lock_guard lock(mu_);
  std::erase_if(loads_, [&](const LoadJob& job) { return job.ticket == ticket; });
  if (running_ticket_ == ticket) running_cancelled_ = true;
  std::erase_if(finished_, [&](const KvTierLoad& load) { return load.ticket == ticket; });
}

std::vector<KvTierLoad> KvDiskTier::Impl::TakeFinishedLoads() {
  std::lock_guard lock(mu_);
  return std::exchange(finished_, {});
}

int64_t KvDiskTier::Impl::Purge(std::string_view salt_prefix) {
  std::future<int64_t> done;
  {
    std::lock_guard lock(mu_);
    if (stop_) return 0;
    purges_.push_back(PurgeJob{std::string(salt_prefix), {}});
    done = purges_.back().done.get_future();
  }
  writer_cv_.notify_one();
  return done.get();
}

void KvDiskTier::Impl::Flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  flushed_cv_.wait_until(lock, deadline,
                         [&] { return stop_ || (scanned_ && writes_.empty() && !writing_); });
}

std::vector<KvTierEvent> KvDiskTier::Impl::TakeEvents() {
  std::lock_guard lock(mu_);
  return std::exchange(events_, {});
}

KvDiskTierStats KvDiskTier::Impl::Stats() const {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  KvDiskTierStats stats = stats_;
  stats.enabled = WritesAllowedLocked(now);
  stats.bytes = index_.mine_bytes();
  stats.blocks = index_.mine_blocks();
  stats.other_bytes = index_.other_bytes();
  return stats;
}

void KvDiskTier::Impl::Reject(const std::string& path, RejectReason reason, const std::string& why,
                              const BlockDigest* digest) {
  const bool removed = tier_files::Remove(path);
  const char* name = reason == RejectReason::kCorrupt     ? "corrupt"
                     : reason == RejectReason::kTruncated ? "truncated"
                                                          : "mismatched";
  // One line a file: a refused file is deleted, so no later request logs it again.
  spdlog::warn("KV disk tier: {} block file {} ({}), {}", name, path, why,
               removed ? "deleted" : "could not be deleted");
  std::lock_guard lock(mu_);
  ++stats_.rejects;
  switch (reason) {
    case RejectReason::kCorrupt:
      ++stats_.rejects_corrupt;
      break;
    case RejectReason::kTruncated:
      ++stats_.rejects_truncated;
      break;
    case RejectReason::kMismatch:
      ++stats_.rejects_mismatch;
      break;
  }
  if (digest == nullptr) return;
  const std::optional<DiskIndexEntry> entry = index_.Erase(*digest);
  if (entry && entry->mine()) events_.push_back(KvTierEvent{false, entry->hash, {}, {}});
}

// The public face.

std::unique_ptr<KvDiskTier> KvDiskTier::Open(KvDiskTierConfig config, std::function<void()> wake) {
  auto impl = std::make_unique<Impl>(std::move(config), std::move(wake));
  impl->Start();
  return std::unique_ptr<KvDiskTier>(new KvDiskTier(std::move(impl)));
}

KvDiskTier::KvDiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvDiskTier::~KvDiskTier() = default;

const BlockDigest& KvDiskTier::root() const { return impl_->root(); }
int KvDiskTier::CountPresent(std::span<const BlockDigest> digests, int first) {
  return impl_->CountPresent(digests, first);
}
bool KvDiskTier::Contains(const BlockDigest& digest) const { return impl_->Contains(digest); }
void KvDiskTier::Write(const BlockDigest& digest, BlockHash hash,
                       std::optional<BlockHash> parent_hash, std::string_view salt,
                       std::span<const TokenId> tokens, std::vector<uint8_t> payload) {
  impl_->Write(digest, hash, parent_hash, salt, tokens, std::move(payload));
}
uint64_t KvDiskTier::Load(std::string salt, std::vector<KvTierBlockRef> blocks) {
  return impl_->Load(std::move(salt), std::move(blocks));
}
void KvDiskTier::Cancel(uint64_t ticket) { impl_->Cancel(ticket); }
std::vector<KvTierLoad> KvDiskTier::TakeFinishedLoads() { return impl_->TakeFinishedLoads(); }
int64_t KvDiskTier::Purge(std::string_view salt_prefix) { return impl_->Purge(salt_prefix); }
void KvDiskTier::Flush(std::chrono::steady_clock::time_point deadline) { impl_->Flush(deadline); }
std::vector<KvTierEvent> KvDiskTier::TakeEvents() { return impl_->TakeEvents(); }
KvDiskTierStats KvDiskTier::Stats() const { return impl_->Stats(); }

std::string KvDiskTier::Impl::BlockPath(const BlockDigest& digest) const {
  const std::string hex = DigestHex(digest);
  return id_dir_ + "/" + hex.substr(0, 2) + "/" + hex + std::string(tier_files::kBlockSuffix);
}

}  // namespace tokenmill
