// The engine's side of the KV tiers below the pool (--kv-cache-host-size, --kv-cache-dir;
// docs/design.md "KV tiers"): each prefix block the pool caches is copied through to the host
// tier (cache/tiers/kv_host_tier.h) and written through to the disk tier (kv_disk_tier.h). A new
// request whose prompt continues past the pool's hit takes the blocks the host tier holds at
// once (memory copies, queued on CUDA with the steps), then, if its prompt continues on disk,
// waits off the engine loop until the loader thread has read and verified those blocks. They go
// back into the pool as cached blocks, which the request's admission hits like any other.
//
// The engine thread calls it, but for Purge, Flush and the stats (the tiers' own locking makes
// them safe from any thread) and the wake callback. The pool is the only KV a forward pass reads:
// a block leaves it as bytes copied out before any step can overwrite it, and comes back
// before any step needs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "cache/tiers/kv_disk_tier.h"
#include "cache/tiers/kv_host_tier.h"
#include "common/status.h"
#include "engine/engine_config.h"
#include "engine/forward_backend.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace tokenmill {

// A tier's change, with the tier it happened in as KV events name it (vLLM's `medium`).
struct KvTierChange {
  const char* medium;  // "CPU": the host tier; "DISK"
  KvTierEvent event;
};

class KvTiering {
 public:
  // Opens the tiers `settings` asks for (a host tier of settings.host_bytes when > 0, a disk
  // tier under settings.dir when set) under `identity` (KvTierIdentity) over `kv`'s pool and
  // the backend's; both must outlive it. ResourceExhausted when the host tier's memory cannot
  // be had.
  static StatusOr<std::unique_ptr<KvTiering>> Open(const KvTierSettings& settings,
                                                  std::string identity, KvCacheManager& kv,
                                                  ForwardBackend& backend);
  ~KvTiering();
  KvTiering(const KvTiering&) = delete;
  KvTiering& operator=(const KvTiering&) = delete;

  // Called from the disk tier's threads when a load finishes or its contents changed (null:
  // nobody to wake).
  void SetWake(std::function<void()> wake);

  // Copies the blocks of the prefixes the pool cached since the last call into the tiers. Call
  // it before anything may overwrite a block the pool evicted since: a forward pass or an
  // import.
  void WriteNewlyCached();

  // Brings the full prompt blocks past the pool's hit (at least one token is left to compute)
  // back from the host tier at once, then starts loading those on disk past them; returns the
  // load's ticket, or 0 when there is nothing to wait for. A load already running from the
  // same block is shared: its ticket comes back (the users behind one system prompt after a
  // restart read it once). Loads in flight hold at most the pool's bytes: past that a request
  // computes its prefix (0).
  uint64_t StartLoad(std::span<const TokenId> prompt, std::string_view salt);
  // Imports the loads finished since the last call into the pool; returns their tickets (the
  // requests that may now be added).
  std::vector<uint64_t> ImportFinishedLoads();
  // Forgets a load (the last request waiting for it was aborted).
  void Cancel(uint64_t ticket);

  // Waits until every queued disk write is on disk, or the deadline.
  void Flush(std::chrono::steady_clock::time_point deadline);
  // Drops every block whose salt starts with salt_prefix from both tiers; returns how many.
  int64_t Purge(std::string_view salt_prefix);
  std::vector<KvTierChange> TakeEvents();
  std::optional<KvDiskTierStats> DiskStats() const;
  std::optional<KvHostTierStats> HostStats() const;

 private:
  struct PendingLoad {
    std::vector<TokenId> prompt;
    std::string salt;
    int first_block = 0;  // the first block it reads: the pool's hit, or group 1's window
    BlockDigest first_digest{};
    int64_t bytes = 0;    // of the blocks it reads
  };
  struct Wake {
    std::mutex mutex;
    std::function<void()> call;
  };

  KvTiering(std::string identity, KvCacheManager& kv, ForwardBackend& backend);
  // The change's block in each KV group; nullopt when the sliding-window group's copy is gone.
  std::optional<std::vector<BlockId>> GroupBlocksOf(const PrefixChange& change) const;
  KvCacheRequest LookupRequest(std::span<const TokenId> prompt, std::string_view salt) const;
  // The pool's prefix hit for the prompt, in blocks.
  int PoolHit(std::span<const TokenId> prompt, std::string_view salt) const;
  // The blocks [first, end) to bring back from a tier that holds count(from) blocks in a row
  // from block `from`: from the pool's hit `hit` on, or, with a sliding-window group, from the
  // window before the end when the tier holds it (that group may have let those blocks go).
  std::pair<int, int> LoadRange(int hit, const std::function<int(int from)>& count) const;
  void ImportFromHost(std::span<const TokenId> prompt, std::string_view salt,
                      std::span<const BlockDigest> digests);
  // Drops a load's bookkeeping (imported or cancelled).
  void Forget(std::unordered_map<uint64_t, PendingLoad>::iterator load);

  KvCacheManager& kv_;
  ForwardBackend& backend_;
  const int64_t block_bytes_;
  const std::string identity_;
  const BlockDigest root_;  // of every block's digest chain (IdentityDigest)
  std::shared_ptr<Wake> wake_;  // shared with the loader thread's callback
  HostKvMemory host_memory_;
  std::unique_ptr<KvHostTier> host_;  // null: no host tier
  std::unique_ptr<KvDiskTier> disk_;  // null: no disk tier
  std::vector<PrefixChange> changes_;  // the pool's, since WriteNewlyCached
  std::unordered_map<PrefixId, BlockDigest> digests_;  // of the prefixes cached in the pool
  std::unordered_map<uint64_t, PendingLoad> loads_;
  std::map<BlockDigest, uint64_t> load_from_;  // the first block of each load in flight
  int64_t loading_bytes_ = 0;                  // summed over loads_
  const int64_t max_loading_bytes_;            // the pool's bytes
};

// The text that names what makes a block's bytes valid (KvDiskTierConfig::identity): the
// model's tensor data digest, the KV format version, the device and CPU kernels, the KV
// types, the block size and the model's KV-relevant settings (layers, heads, RoPE).
// `model_digest` is ModelTensorDigest's.
std::string KvTierIdentity(const std::string& model_digest, const std::string& device,
                           const std::string& kv_types, int block_size,
                           const std::string& model_settings);

// The model's settings that shape its K/V bytes besides its tensors: layers, KV heads, RoPE
// as each layer applies it (KvTierIdentity's model_settings).
std::string KvModelSettings(const ModelConfig& config);
// The SHA-256 of a model file's tensors (names, types, shapes and data), as hex: what
// identifies the model whatever its metadata (a new chat template keeps its blocks valid).
std::string ModelTensorDigest(const GgufFile& file);
// `compute`'s digest of the model file at model_path, cached in `cache_dir` by the file's
// path, size, modification time and inode (model directories are often read-only; hashing a
// 5 GB file takes seconds).
std::string CachedModelDigest(const std::string& cache_dir, const std::string& model_path,
                              const std::function<std::string()>& compute);

}  // namespace tokenmill
