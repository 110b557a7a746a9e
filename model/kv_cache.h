// KV memory for the forward pass, and a small builder of ragged-batch inputs over it.
// The engine will own its own pool and cache manager; these serve the CLI and tests.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/kv_cache_view.h"
#include "kernels/paged_kv.h"
#include "model/config.h"

namespace tokenmill {

// Owns zeroed K/V memory (and the quantized types' scales) of a model's KV pools: num_blocks
// blocks of every layer, or group_num_blocks[g] blocks of each layer of KV group g
// (model/forward_input.h), so that a sliding-window group's smaller pool takes only its
// layers' bytes; each layer's rows of its own shape, none for a layer that reads another's
// KV (ModelConfig::kv_source_layers), no V arrays for a latent cache (ModelConfig::mla). `type`
// is K's, and V's unless v_type is given. The memory is mapped anonymous memory, committed at
// once or, for an elastic pool (cache/block_pool.h) sized for a whole shared KV limit, page by
// page as blocks are written; Release gives a range back.
class KvCacheStorage {
 public:
  enum class Commit { kAtOnce, kOnWrite };
  KvCacheStorage(const ModelConfig& config, KvType type, int64_t num_blocks, int block_size,
                 std::optional<KvType> v_type = std::nullopt, Commit commit = Commit::kAtOnce);
  KvCacheStorage(const ModelConfig& config, KvType type, std::span<const int64_t> group_num_blocks,
                 int block_size, std::optional<KvType> v_type = std::nullopt,
                 Commit commit = Commit::kAtOnce);
  KvCacheStorage(const KvCacheStorage&) = delete;
  KvCacheStorage& operator=(const KvCacheStorage&) = delete;
  KvCacheView view();

  // Lets the RAM of blocks [first_block, end_block) of KV group `group` go (the whole pages
  // inside that range of each array); they read as zeros when next written. InvalidArgument
  // for a range outside the group's pool.
  Status Release(int group, int64_t first_block, int64_t end_block);

 private:
  // Zeroed bytes, mapped.
  class MappedArray {
   public:
    MappedArray(int64_t bytes, Commit commit);
    ~MappedArray();
    MappedArray(const MappedArray&) = delete;
    MappedArray& operator=(const MappedArray&) = delete;
    uint8_t* data() const { return data_; }
    // Drops the whole pages within [begin, end).
    void Drop(int64_t begin, int64_t end);

   private:
    uint8_t* data_;
    int64_t bytes_;
  };

  std::vector<KvCacheView> layer_views_;  // the view's (kv_cache_view.h)
  std::vector<int> layer_groups_;         // each layer's KV group; -1 for one that stores none
  KvCacheView view_;
  // Each storing layer's K and V codes and scales; a deque, so that adding one moves none.
  std::deque<MappedArray> arrays_;
};

// Copies each of `copies` in order through copy_bytes(dst, src, bytes), once per array (K, V
// and their scales) of each layer of the copy's group, over `view` (host or device memory:
// the caller's copy_bytes says which). InvalidArgument for a block outside the group's pool
// or a group the model does not have; copy_bytes's first error stops it.
using CopyBytes = std::function<Status(void* dst, const void* src, int64_t bytes)>;
Status CopyKvBlocks(const KvCacheView& view, const ModelConfig& config,
                    std::span<const KvBlockCopy> copies, const CopyBytes& copy_bytes);

// Bytes of one block of every KV group (each storing layer's K, V and scales), for a tier
// below the pool: what ReadKvBlock and WriteKvBlock move.
int64_t KvBlockBytes(const KvCacheView& view, const ModelConfig& config);
// Copies block group_blocks[g] of each KV group g (one entry a group: the same id in every
// group when one table addresses them all) out of the pool into `out`, or from `in` into it,
// array after array in group and layer order, through copy_bytes (host or device memory). A
// group's bytes keep their offsets whatever its block; a negative entry skips the group (its
// bytes of `out` stay as they are, of `in` unread). InvalidArgument for a block outside its
// pool, not one entry a group, or a buffer not KvBlockBytes long.
Status ReadKvBlock(const KvCacheView& view, const ModelConfig& config,
                   std::span<const int64_t> group_blocks, std::span<uint8_t> out,
                   const CopyBytes& copy_bytes);
Status WriteKvBlock(const KvCacheView& view, const ModelConfig& config,
                    std::span<const int64_t> group_blocks, std::span<const uint8_t> in,
                    const CopyBytes& copy_bytes);

// Sequences that take fresh blocks from a bump allocator, and the step inputs for them. Every
// KV group gets the same tables (nothing is released: all layers keep every block), so give
// num_kv_groups = NumKvGroups(config) and a storage with num_blocks in every group.
class BatchBuilder {
 public:
  BatchBuilder(int block_size, int64_t num_blocks, int num_kv_groups = 1);

  // A new empty sequence; returns its index.
  int AddSequence();
  int32_t SequenceLength(int seq) const { return seqs_[seq].length; }

  // Adds `tokens` of sequence `seq` to the current step (each sequence at most once per
  // step), after those it already has; `logits` says which of them need logits.
  enum class Logits { kNone, kLast, kAll };
  Status Append(int seq, std::span<const int32_t> tokens, Logits logits);

  // Keeps the first `length` tokens of sequence `seq` (between steps); its blocks past them
  // are kept aside for its later appends.
  Status Truncate(int seq, int32_t length);

  // Views of the current step (valid until the next Append or Clear).
  std::span<const int32_t> token_ids() const { return token_ids_; }
  std::span<const int32_t> logit_rows() const { return logit_rows_; }
  RaggedBatch batch();
  // Ends the step: the sequences keep their tokens; the step inputs are cleared.
  void Clear();

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    std::vector<int32_t> spare_blocks;  // dropped by Truncate, reused first (last on top)
    int32_t length = 0;
  };
  int block_size_;
  int64_t num_blocks_;
  int64_t next_free_block_ = 0;
  std::vector<Sequence> seqs_;
  std::vector<int32_t> step_seqs_;
  std::vector<int32_t> token_ids_, positions_, cu_seqlens_{0}, logit_rows_;
  KvBlockTableBuilder blocks_;  // every KV group's
  std::vector<KvBlockTable> block_tables_;  // batch()'s views of blocks_, one per group
};

}  // namespace tokenmill
