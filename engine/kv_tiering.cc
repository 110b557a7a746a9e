#include "engine/kv_tiering.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "cache/tiers/block_digest.h"

namespace tokenmill {
namespace {

// No request has this id: the lookups before a request is added use it.
constexpr uint64_t kLookupId = std::numeric_limits<uint64_t>::max();

// Bump when the bytes a block holds change for the same model and settings (a new KV layout or
// arithmetic): an upgraded server must not serve blocks an older one wrote.
constexpr int kKvFormatVersion = 1;

}  // namespace

StatusOr<std::unique_ptr<KvTiering>> KvTiering::Open(const KvTierSettings& settings,
                                                      std::string identity, KvCacheManager& kv,
                                                      ForwardBackend& backend) {
  std::unique_ptr<KvTiering> tiering(new KvTiering(std::move(identity), kv, backend));
  if (settings.host_bytes > 0) {
    TM_ASSIGN_OR_RETURN(tiering->host_memory_, backend.AllocateHostKv(settings.host_bytes));
    tiering->host_ = std::make_unique<KvHostTier>(tiering->host_memory_.bytes,
                                                  tiering->block_bytes_);
  }
  if (!settings.dir.empty()) {
    KvDiskTierConfig config{.dir = settings.dir,
                            .max_bytes = settings.max_bytes,
                            .ttl = settings.ttl,
                            .identity = tiering->identity_,
                            .payload_bytes = tiering->block_bytes_,
                            .block_size = kv.block_size()};
    tiering->disk_ = KvDiskTier::Open(std::move(config), [wake = tiering->wake_] {
      std::lock_guard<std::mutex> lock(wake->mutex);
      if (wake->call) wake->call();
    });
    // The tier's scan of what an earlier run left: a restarted server serves it from its first
    // request (a scan reads each file's header only; bounded for a slow disk).
    tiering->disk_->Flush(std::chrono::steady_clock::now() + std::chrono::seconds(60));
  }
  return tiering;
}

KvTiering::KvTiering(std::string identity, KvCacheManager& kv, ForwardBackend& backend)
    : kv_(kv),
      backend_(backend),
      block_bytes_(backend.KvBlockBytes()),
      identity_(std::move(identity)),
      root_(IdentityDigest(identity_)),
      wake_(std::make_shared<Wake>()),
      max_loading_bytes_(int64_t{kv.num_blocks()} * block_bytes_) {
  kv_.set_prefix_log(&changes_);
}

KvTiering::~KvTiering() {
  SetWake(nullptr);
  kv_.set_prefix_log(nullptr);
}

void KvTiering::SetWake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(wake_->mutex);
  wake_->call = std::move(wake);
}

void KvTiering::WriteNewlyCached() {
  if (changes_.empty()) return;
  // Off or paused (an unusable or full directory): the blocks are named, not copied out.
  const bool to_disk = disk_ != nullptr && disk_->Stats().enabled;
  struct DiskWrite {
    const PrefixChange* change;
    BlockDigest digest;
    std::optional<BlockHash> parent_hash;
    std::vector<uint8_t> payload;
  };
  std::vector<DiskWrite> disk_writes;
  for (const PrefixChange& change : changes_) {
    if (!change.stored) {
      digests_.erase(change.prefix_id);
      continue;
    }
    const BlockDigest* parent = nullptr;
    if (change.parent_prefix_id != kEmptyPrefix) {
      const auto it = digests_.find(change.parent_prefix_id);
      if (it == digests_.end()) continue;  // a chain the tiers never saw begin: not nameable
      parent = &it->second;
    }
    const BlockDigest digest = NextBlockDigest(root_, parent, change.extra_key, change.tokens);
    digests_.emplace(change.prefix_id, digest);
    const bool disk_wants = to_disk && !disk_->Contains(digest);
    if (!disk_wants && host_ == nullptr) continue;
    const std::optional<std::vector<BlockId>> blocks = GroupBlocksOf(change);
    if (!blocks.has_value()) continue;  // group 1 let its copy go already: not whole
    const std::optional<BlockHash> parent_hash =
        parent != nullptr ? std::optional(change.parent_hash) : std::nullopt;
    if (host_ != nullptr) {
      const std::span<uint8_t> slot =
          host_->Store(digest, change.hash, parent_hash, change.extra_key, change.tokens);
      if (!slot.empty()) {
        if (const Status read = backend_.ReadKvBlock(*blocks, slot); !read.ok()) {
          spdlog::warn("KV tiers: block {} not kept in host memory: {}", change.block,
                       read.ToString());
          host_->Erase(digest);
        }
      }
    }
    if (!disk_wants) continue;
    std::vector<uint8_t> payload(static_cast<size_t>(block_bytes_));
    if (const Status read = backend_.ReadKvBlock(*blocks, payload); !read.ok()) {
      spdlog::warn("KV tiers: block {} not written to disk: {}", change.block, read.ToString());
      continue;
    }
    disk_writes.push_back({&change, digest, parent_hash, std::move(payload)});
  }
  if (!disk_writes.empty()) {
    if (const Status copied = backend_.FinishKvCopies(); !copied.ok()) {
      spdlog::warn("KV tiers: {} blocks not written to disk: {}", disk_writes.size(),
                   copied.ToString());
      disk_writes.clear();
    }
  }
  for (DiskWrite& write : disk_writes) {
    const PrefixChange& change = *write.change;
    disk_->Write(write.digest, change.hash, write.parent_hash, change.extra_key, change.tokens,
                 std::move(write.payload));
  }
  changes_.clear();
}

std::optional<std::vector<BlockId>> KvTiering::GroupBlocksOf(const PrefixChange& change) const {
  std::vector<BlockId> blocks{change.block};
  if (kv_.num_groups() == 1) return blocks;
  // Group 1's copy of the prefix, known by group 0's prefix ids (kv_cache_manager.h).
  const std::optional<BlockId> sliding =
      kv_.pool(1).FindCached(BlockKey{.hash = change.hash,
                                      .parent_hash = change.parent_hash,
                                      .parent_prefix_id = change.parent_prefix_id,
                                      .tokens = change.tokens,
                                      .extra_key = change.extra_key});
  if (!sliding.has_value()) return std::nullopt;
  blocks.push_back(*sliding);
  return blocks;
}

KvCacheRequest KvTiering::LookupRequest(std::span<const TokenId> prompt,
                                        std::string_view salt) const {
  return KvCacheRequest{
      .id = kLookupId, .verified_tokens = prompt, .num_computed_tokens = 0, .cache_salt = salt};
}

int KvTiering::PoolHit(std::span<const TokenId> prompt, std::string_view salt) const {
  return static_cast<int>(kv_.FindComputedBlocks(LookupRequest(prompt, salt)).blocks.size());
}

std::pair<int, int> KvTiering::LoadRange(int hit, const std::function<int(int from)>& count) const {
  const int end = hit + count(hit);
  if (end > hit && kv_.num_groups() > 1) {
    const int window = kv_.FirstBlockInWindow(end * kv_.block_size());
    if (window < hit && count(window) >= end - window) return {window, end};
  }
  return {hit, end};
}

void KvTiering::ImportFromHost(std::span<const TokenId> prompt, std::string_view salt,
                               std::span<const BlockDigest> digests) {
  // The import takes blocks from the pool: what it cached before goes to the tiers first (and
  // may take host slots, so before the range is known).
  WriteNewlyCached();
  const int hit = PoolHit(prompt, salt);
  if (hit >= static_cast<int>(digests.size())) return;
  // Plain ints, not a structured binding: clang 14 (the fuzz build's) cannot capture one.
  const std::pair<int, int> range =
      LoadRange(hit, [&](int from) { return host_->CountPresent(digests, from); });
  const int first = range.first;
  const int end = range.second;
  if (first == end) return;
  kv_.ImportPrefixBlocks(LookupRequest(prompt, salt), end,
                         [&](int index, std::span<const BlockId> group_blocks) {
                           if (index < first) return false;
                           const std::span<const uint8_t> bytes =
                               host_->Load(digests[static_cast<size_t>(index)]);
                           if (bytes.empty()) return false;
                           const Status written = backend_.WriteKvBlock(group_blocks, bytes);
                           if (!written.ok()) {
                             spdlog::warn("KV tiers: a block not imported from host memory: {}",
                                          written.ToString());
                           }
                           return written.ok();
                         });
}

uint64_t KvTiering::StartLoad(std::span<const TokenId> prompt, std::string_view salt) {
  if (!kv_.prefix_caching() || prompt.empty()) return 0;
  const int block_size = kv_.block_size();
  // As the pool's lookup: the last token is computed again.
  const size_t num_full = static_cast<size_t>((prompt.size() - 1) / block_size) * block_size;
  if (num_full == 0) return 0;
  const std::vector<BlockDigest> digests =
      ChainBlockDigests(root_, salt, prompt.first(num_full), block_size);
  if (host_ != nullptr) ImportFromHost(prompt, salt, digests);
  if (disk_ == nullptr) return 0;
  const int hit = PoolHit(prompt, salt);
  if (hit >= static_cast<int>(digests.size())) return 0;
  if (const auto running = load_from_.find(digests[static_cast<size_t>(hit)]);
      running != load_from_.end()) {
    return running->second;
  }
  const auto [first, end] =
      LoadRange(hit, [&](int from) { return disk_->CountPresent(digests, from); });
  const int64_t bytes = int64_t{end - first} * block_bytes_;
  if (first == end || loading_bytes_ + bytes > max_loading_bytes_) return 0;
  std::vector<KvTierBlockRef> refs;
  refs.reserve(static_cast<size_t>(end - first));
  for (int i = first; i < end; ++i) {
    const auto tokens = prompt.subspan(static_cast<size_t>(i) * block_size, block_size);
    refs.push_back({.digest = digests[static_cast<size_t>(i)],
                    .tokens = std::vector<TokenId>(tokens.begin(), tokens.end())});
  }
  const uint64_t ticket = disk_->Load(std::string(salt), std::move(refs));
  loads_.emplace(ticket, PendingLoad{.prompt = std::vector<TokenId>(prompt.begin(), prompt.end()),
                                     .salt = std::string(salt),
                                     .first_block = first,
                                     .first_digest = digests[static_cast<size_t>(hit)],
                                     .bytes = bytes});
  load_from_.emplace(digests[static_cast<size_t>(hit)], ticket);
  loading_bytes_ += bytes;
  return ticket;
}

std::vector<uint64_t> KvTiering::ImportFinishedLoads() {
  if (disk_ == nullptr) return {};
  std::vector<KvTierLoad> finished = disk_->TakeFinishedLoads();
  std::vector<uint64_t> tickets;
  if (finished.empty()) return tickets;
  // The imports take blocks from the pool: what it cached before goes to the tiers first.
  WriteNewlyCached();
  for (KvTierLoad& load : finished) {
    const auto it = loads_.find(load.ticket);
    if (it == loads_.end()) continue;  // cancelled
    const PendingLoad& pending = it->second;
    const int end_block = pending.first_block + static_cast<int>(load.payloads.size());
    kv_.ImportPrefixBlocks(
        LookupRequest(pending.prompt, pending.salt), end_block,
        [&](int index, std::span<const BlockId> group_blocks) {
          // The pool's hit may have grown since (another request computed it) or shrunk
          // (evicted): only blocks the load holds come back.
          if (index < pending.first_block) return false;
          const Status written = backend_.WriteKvBlock(
              group_blocks, load.payloads[static_cast<size_t>(index - pending.first_block)]);
          if (!written.ok()) spdlog::warn("KV tiers: a block not imported: {}", written.ToString());
          return written.ok();
        });
    tickets.push_back(load.ticket);
    Forget(it);
  }
  return tickets;
}

void KvTiering::Cancel(uint64_t ticket) {
  if (disk_ != nullptr) disk_->Cancel(ticket);
  if (const auto it = loads_.find(ticket); it != loads_.end()) Forget(it);
}

void KvTiering::Forget(std::unordered_map<uint64_t, PendingLoad>::iterator load) {
  load_from_.erase(load->second.first_digest);
  loading_bytes_ -= load->second.bytes;
  loads_.erase(load);
}

void KvTiering::Flush(std::chrono::steady_clock::time_point deadline) {
  if (disk_ != nullptr) disk_->Flush(deadline);
}

int64_t KvTiering::Purge(std::string_view salt_prefix) {
  return (host_ != nullptr ? host_->Purge(salt_prefix) : 0) +
         (disk_ != nullptr ? disk_->Purge(salt_prefix) : 0);
}

std::vector<KvTierChange> KvTiering::TakeEvents() {
  std::vector<KvTierChange> changes;
  const auto take = [&](const char* medium, std::vector<KvTierEvent> events) {
    for (KvTierEvent& event : events) changes.push_back({medium, std::move(event)});
  };
  if (host_ != nullptr) take("CPU", host_->TakeEvents());
  if (disk_ != nullptr) take("DISK", disk_->TakeEvents());
  return changes;
}

std::optional<KvDiskTierStats> KvTiering::DiskStats() const {
  return disk_ != nullptr ? std::optional(disk_->Stats()) : std::nullopt;
}

std::optional<KvHostTierStats> KvTiering::HostStats() const {
  return host_ != nullptr ? std::optional(host_->Stats()) : std::nullopt;
}

std::string KvTierIdentity(const std::string& model_digest, const std::string& device,
                           const std::string& kv_types, int block_size,
                           const std::string& model_settings) {
  std::ostringstream text;
  text << "tokenmill KV blocks\n"
       << "kv format: " << kKvFormatVersion << "\n"
       << "model tensors sha256: " << model_digest << "\n"
       << "device: " << device << "\n"
       << "kv types: " << kv_types << "\n"
       << "block size: " << block_size << "\n"
       << "model settings: " << model_settings << "\n"
       << "adapter: none\n";
  return text.str();
}

std::string KvModelSettings(const ModelConfig& config) {
  std::ostringstream text;
  text << std::hexfloat << "layers " << config.n_layers << ", context " << config.context_length
       << ", rope original context " << config.rope_original_context << ", yarn beta "
       << config.rope_yarn_beta_fast << ' ' << config.rope_yarn_beta_slow;
  for (int layer = 0; layer < config.n_layers; ++layer) {
    const ModelConfig::LayerShape shape = config.Shape(layer);
    const RopeParams rope = LayerRope(config, layer, {});
    text << "; " << layer << ": kv heads " << shape.n_kv_heads << " x " << shape.head_dim
         << " from layer " << config.KvSourceLayer(layer) << ", rope "
         << static_cast<int>(rope.style) << ' ' << rope.n_rot << ' ' << rope.freq_base << ' '
         << rope.position_scale << ' ' << rope.ext_factor << ' ' << rope.corr_low << ' '
         << rope.corr_high << ' ' << rope.attn_factor;
  }
  if (config.HasLatentKv()) text << "; latent " << config.mla.kv_lora_rank;
  return text.str();
}

std::string ModelTensorDigest(const GgufFile& file) {
  // Each tensor's name, type and shape, then the SHA-256 of its bytes: the data is hashed where
  // it lies (no copy of a file of gigabytes).
  std::string summary;
  for (const GgufTensor& tensor : file.tensors()) {
    summary.append(tensor.name);
    summary += '\0';
    summary += std::to_string(tensor.ggml_type);
    for (const int64_t dim : tensor.shape) summary += ' ' + std::to_string(dim);
    summary += '\0';
    const BlockDigest data = Sha256(std::string_view(reinterpret_cast<const char*>(tensor.data),
                                                     static_cast<size_t>(tensor.num_bytes)));
    summary.append(reinterpret_cast<const char*>(data.data()), data.size());
  }
  return DigestHex(Sha256(summary));
}

std::string CachedModelDigest(const std::string& cache_dir, const std::string& model_path,
                              const std::function<std::string()>& compute) {
  std::error_code error;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(model_path, error);
  struct stat info {};
  if (error || stat(model_path.c_str(), &info) != 0) return compute();
  std::ostringstream key;
  key << canonical.string() << '\n'
      << info.st_size << '\n'
      << info.st_mtim.tv_sec << '.' << info.st_mtim.tv_nsec << '\n'
      << info.st_dev << ':' << info.st_ino;
  const std::filesystem::path file = std::filesystem::path(cache_dir) / "model-digests" /
                                     DigestHex(Sha256(key.str()));
  {
    std::ifstream in(file);
    std::string cached;
    if (in >> cached && cached.size() == 64) return cached;
  }
  const std::string digest = compute();
  // Beside the blocks, as private as they are (before the tier, which makes its own 0700).
  for (const std::filesystem::path& dir : {std::filesystem::path(cache_dir), file.parent_path()}) {
    if (std::filesystem::create_directory(dir, error)) {
      std::filesystem::permissions(dir, std::filesystem::perms::owner_all, error);
    }
  }
  // Written under a temporary name and renamed: a reader sees all of it or nothing.
  const std::filesystem::path temporary = file.string() + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << digest << '\n';
  }
  std::filesystem::rename(temporary, file, error);
  if (error) std::filesystem::remove(temporary, error);
  return digest;
}

}  // namespace tokenmill
