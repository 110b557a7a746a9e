// The engine's side of the KV tiers (--kv-cache-dir, docs/design.md "KV tiers"): each prefix
// block the pool caches is written through to the disk tier (cache/tiers/), and a new request
// whose prompt continues on disk past the pool's hit waits, off the engine loop, until the
// loader thread has read and verified those blocks; they then go back into the pool as
// cached blocks, which the request's admission hits like any other.
//
// The engine thread calls it, but for Purge, Flush and Stats (the disk tier's own locking makes
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
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "cache/tiers/kv_disk_tier.h"
#include "common/status.h"
#include "engine/engine_config.h"
#include "engine/forward_backend.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace tokenmill {

class KvTiering {
 public:
  // Opens the disk tier under `identity` (KvTierIdentity) over `kv`'s group 0 and the backend's
  // pool; both must outlive it.
  KvTiering(const KvTierSettings& settings, std::string identity, KvCacheManager& kv,
            ForwardBackend& backend);
  ~KvTiering();
  KvTiering(const KvTiering&) = delete;
  KvTiering& operator=(const KvTiering&) = delete;

  // Called from the loader thread when a load finishes (null: nobody to wake).
  void SetWake(std::function<void()> wake);

  // Writes the blocks of the prefixes the pool cached since the last call. Call it before
  // anything may overwrite a block the pool evicted since: a forward pass or an import.
  void WriteNewlyCached();

  // Starts loading the full prompt blocks on disk past the pool's hit (at least one token is
  // left to compute); returns the load's ticket, or 0 when there is nothing to load. A load
  // already running from the same block is shared: its ticket comes back (the users behind one
  // system prompt after a restart read it once). Loads in flight hold at most the pool's bytes:
  // past that a request computes its prefix (0).
  uint64_t StartLoad(std::span<const TokenId> prompt, std::string_view salt);
  // Imports the loads finished since the last call into the pool; returns their tickets (the
  // requests that may now be added).
  std::vector<uint64_t> ImportFinishedLoads();
  // Forgets a load (the last request waiting for it was aborted).
  void Cancel(uint64_t ticket);

  // Waits until every queued write is on disk, or the deadline.
  void Flush(std::chrono::steady_clock::time_point deadline) { disk_->Flush(deadline); }
  int64_t Purge(std::string_view salt_prefix) { return disk_->Purge(salt_prefix); }
  std::vector<KvTierEvent> TakeEvents() { return disk_->TakeEvents(); }
  KvDiskTierStats Stats() const { return disk_->Stats(); }

 private:
  struct PendingLoad {
    std::vector<TokenId> prompt;
    std::string salt;
    int first_block = 0;  // the pool's hit when the load started
    BlockDigest first_digest{};
    int64_t bytes = 0;    // of the blocks it reads
  };
  struct Wake {
    std::mutex mutex;
    std::function<void()> call;
  };

  KvCacheRequest LookupRequest(std::span<const TokenId> prompt, std::string_view salt) const;
  // Drops a load's bookkeeping (imported or cancelled).
  void Forget(std::unordered_map<uint64_t, PendingLoad>::iterator load);

  KvCacheManager& kv_;
  ForwardBackend& backend_;
  const int64_t block_bytes_;
  std::shared_ptr<Wake> wake_;  // shared with the loader thread's callback
  std::unique_ptr<KvDiskTier> disk_;
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
