#include "model/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <new>
#include <string>
#include <utility>

#include "common/check.h"
#include "kernels/kv_type.h"
#include "model/forward_input.h"

namespace tokenmill {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, KvType type, int64_t num_blocks,
                               int block_size, std::optional<KvType> v_type, Commit commit)
    : KvCacheStorage(config, type, std::vector<int64_t>(NumKvGroups(config), num_blocks),
                     block_size, v_type, commit) {}

KvCacheStorage::KvCacheStorage(const ModelConfig& config, KvType type,
                               std::span<const int64_t> group_num_blocks, int block_size,
                               std::optional<KvType> v_type, Commit commit) {
  TM_CHECK_EQ(static_cast<int>(group_num_blocks.size()), NumKvGroups(config));
  // MLA's latent cache has no V of its own (KvCacheView::v_in_k).
  const bool v_in_k = config.HasLatentKv();
  TM_CHECK(!v_in_k || v_type.value_or(type) == type) << "a latent KV cache has one type";
  const KvType v = v_type.value_or(type);
  // One side's codes and scales of `rows` rows of head_dim (page-aligned).
  const auto allocate = [&](KvType side, int64_t rows, int head_dim, void*& codes_at,
                            void*& scales_at) {
    const Status fits = CheckKvTypeFits(side, head_dim);
    TM_CHECK(fits.ok()) << fits.ToString();
    codes_at = arrays_.emplace_back(rows * KvRowBytes(side, head_dim), commit).data();
    const int64_t scale_bytes = rows * KvRowScaleBytes(side, head_dim);
    if (scale_bytes > 0) scales_at = arrays_.emplace_back(scale_bytes, commit).data();
  };
  layer_views_.resize(static_cast<size_t>(config.n_layers));
  layer_groups_.assign(static_cast<size_t>(config.n_layers), -1);
  for (int layer = 0; layer < config.n_layers; ++layer) {
    const ModelConfig::LayerShape shape = config.Shape(layer);
    KvCacheView& own = layer_views_[static_cast<size_t>(layer)];
    own = KvCacheView{
        .type = type,
        .num_blocks = group_num_blocks[static_cast<size_t>(KvGroupOfLayer(config, layer))],
        .block_size = block_size,
        .n_kv_heads = shape.n_kv_heads,
        .head_dim = shape.head_dim,
        .v_type = v,
        .v_in_k = v_in_k};
    if (!config.StoresKv(layer)) continue;  // its source's view, below (the source is earlier)
    layer_groups_[static_cast<size_t>(layer)] = KvGroupOfLayer(config, layer);
    const int64_t rows = own.num_blocks * block_size * shape.n_kv_heads;
    allocate(type, rows, shape.head_dim, own.k, own.k_scale);
    if (v_in_k) {
      own.v = own.k;
      own.v_scale = own.k_scale;
    } else {
      allocate(v, rows, shape.head_dim, own.v, own.v_scale);
    }
  }
  for (int layer = 0; layer < config.n_layers; ++layer) {
    layer_views_[static_cast<size_t>(layer)] =
        layer_views_[static_cast<size_t>(config.KvSourceLayer(layer))];
  }
  view_ = layer_views_[0];
  view_.n_layers = config.n_layers;
  view_.layer_views = layer_views_.data();
}

KvCacheView KvCacheStorage::view() { return view_; }

KvCacheStorage::MappedArray::MappedArray(int64_t bytes, Commit commit)
    : bytes_(std::max<int64_t>(bytes, 1)) {
  // NORESERVE: a pool sized for a whole shared limit commits only what it writes.
  const int how = commit == Commit::kAtOnce ? MAP_POPULATE : MAP_NORESERVE;
  void* data = mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | how, -1, 0);
  if (data == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(data);
}

KvCacheStorage::MappedArray::~MappedArray() { munmap(data_, static_cast<size_t>(bytes_)); }

void KvCacheStorage::MappedArray::Drop(int64_t begin, int64_t end) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  begin = (begin + page - 1) / page * page;
  end = std::min(end, bytes_) / page * page;
  if (end <= begin) return;
  // Private anonymous pages read as zeros after this: nothing of the blocks stays.
  TM_CHECK_EQ(madvise(data_ + begin, static_cast<size_t>(end - begin), MADV_DONTNEED), 0);
}

Status KvCacheStorage::Release(int group, int64_t first_block, int64_t end_block) {
  for (size_t layer = 0; layer < layer_groups_.size(); ++layer) {
    if (layer_groups_[layer] != group) continue;
    const KvCacheView& view = layer_views_[layer];
    if (first_block < 0 || first_block > end_block || end_block > view.num_blocks) {
      return InvalidArgumentError("KV blocks [" + std::to_string(first_block) + ", " +
                                  std::to_string(end_block) + ") lie outside group " +
                                  std::to_string(group) + "'s pool");
    }
    const int64_t block_rows = int64_t{view.block_size} * view.n_kv_heads;
    // Each array holds its rows in block order from its start.
    const auto drop = [&](void* data, int64_t row_bytes) {
      if (data == nullptr || row_bytes == 0) return;
      for (MappedArray& array : arrays_) {
        if (array.data() != data) continue;
        array.Drop(first_block * block_rows * row_bytes, end_block * block_rows * row_bytes);
      }
    };
    drop(view.k, KvRowBytes(view.type, view.head_dim));
    drop(view.k_scale, KvRowScaleBytes(view.type, view.head_dim));
    if (view.v_in_k) continue;
    drop(view.v, KvRowBytes(view.v_type, view.head_dim));
    drop(view.v_scale, KvRowScaleBytes(view.v_type, view.head_dim));
  }
  return OkStatus();
}

namespace {

Status CheckGroup(const ModelConfig& config, int group) {
  if (group < 0 || group >= NumKvGroups(config)) {
    return InvalidArgumentError("a KV block copy names group " + std::to_string(group) +
                                ", which this model does not have");
  }
  return OkStatus();
}

// Calls visit(array base, bytes of one block) for each array (K, V and their scales) of each
// storing layer of `group`, in layer order; the first error stops it.
Status ForEachBlockArray(const KvCacheView& view, const ModelConfig& config, int group,
                         const std::function<Status(void* base, int64_t block_bytes,
                                                    int64_t num_blocks)>& visit) {
  TM_RETURN_IF_ERROR(CheckGroup(config, group));
  for (int layer = 0; layer < config.n_layers; ++layer) {
    if (KvGroupOfLayer(config, layer) != group || !config.StoresKv(layer)) continue;
    const KvCacheView kv = view.Layer(layer);
    const int64_t rows_per_block = int64_t{kv.block_size} * kv.n_kv_heads;
    // V within K (MLA) moves with it.
    const int64_t v_rows = kv.v_in_k ? 0 : rows_per_block;
    for (const auto& [data, bytes] :
         {std::pair{kv.k, rows_per_block * KvRowBytes(kv.type, kv.head_dim)},
          std::pair{kv.v, v_rows * KvRowBytes(kv.v_type, kv.head_dim)},
          std::pair{kv.k_scale, rows_per_block * KvRowScaleBytes(kv.type, kv.head_dim)},
          std::pair{kv.v_scale, v_rows * KvRowScaleBytes(kv.v_type, kv.head_dim)}}) {
      if (bytes == 0) continue;
      TM_RETURN_IF_ERROR(visit(data, bytes, kv.num_blocks));
    }
  }
  return OkStatus();
}

uint8_t* BlockAt(void* base, int64_t block, int64_t block_bytes) {
  return static_cast<uint8_t*>(base) + block * block_bytes;
}

Status CheckBlock(int64_t block, int64_t num_blocks) {
  if (block < 0 || block >= num_blocks) {
    return InvalidArgumentError("KV block " + std::to_string(block) +
                                " is outside the pool of " + std::to_string(num_blocks) +
                                " blocks");
  }
  return OkStatus();
}

// Calls move(the block's bytes in one array, their offset in a buffer of KvBlockBytes, bytes)
// for each array of group_blocks[g] in each KV group g not skipped, after checking the
// buffer's size.
Status ForEachArrayOfBlock(
    const KvCacheView& view, const ModelConfig& config, std::span<const int64_t> group_blocks,
    int64_t buffer_size,
    const std::function<Status(uint8_t* pool, int64_t offset, int64_t bytes)>& move) {
  if (buffer_size != KvBlockBytes(view, config)) {
    return InvalidArgumentError("a KV block of " + std::to_string(buffer_size) + " bytes, not " +
                                std::to_string(KvBlockBytes(view, config)));
  }
  if (static_cast<int>(group_blocks.size()) != NumKvGroups(config)) {
    return InvalidArgumentError(std::to_string(group_blocks.size()) + " KV blocks for " +
                                std::to_string(NumKvGroups(config)) + " KV groups");
  }
  int64_t offset = 0;
  for (int group = 0; group < NumKvGroups(config); ++group) {
    const int64_t block = group_blocks[static_cast<size_t>(group)];
    TM_RETURN_IF_ERROR(ForEachBlockArray(
        view, config, group, [&](void* base, int64_t block_bytes, int64_t num_blocks) -> Status {
          const int64_t at = offset;
          offset += block_bytes;
          if (block < 0) return OkStatus();
          if (Status inside = CheckBlock(block, num_blocks); !inside.ok()) return inside;
          return move(BlockAt(base, block, block_bytes), at, block_bytes);
        }));
  }
  return OkStatus();
}

}  // namespace

Status CopyKvBlocks(const KvCacheView& view, const ModelConfig& config,
                    std::span<const KvBlockCopy> copies, const CopyBytes& copy_bytes) {
  for (const KvBlockCopy& copy : copies) {
    TM_RETURN_IF_ERROR(ForEachBlockArray(
        view, config, copy.group, [&](void* base, int64_t block_bytes, int64_t num_blocks) {
          if (copy.src < 0 || copy.dst < 0 || copy.src >= num_blocks || copy.dst >= num_blocks) {
            return InvalidArgumentError("a KV block copy from " + std::to_string(copy.src) +
                                        " to " + std::to_string(copy.dst) +
                                        " is outside the pool of " + std::to_string(num_blocks) +
                                        " blocks");
          }
          return copy_bytes(BlockAt(base, copy.dst, block_bytes),
                            BlockAt(base, copy.src, block_bytes), block_bytes);
        }));
  }
  return OkStatus();
}

int64_t KvBlockBytes(const KvCacheView& view, const ModelConfig& config) {
  int64_t total = 0;
  for (int group = 0; group < NumKvGroups(config); ++group) {
    const Status status =
        ForEachBlockArray(view, config, group, [&](void*, int64_t bytes, int64_t) {
          total += bytes;
          return OkStatus();
        });
    TM_CHECK(status.ok()) << status.ToString();
  }
  return total;
}

Status ReadKvBlock(const KvCacheView& view, const ModelConfig& config,
                   std::span<const int64_t> group_blocks, std::span<uint8_t> out,
                   const CopyBytes& copy_bytes) {
  return ForEachArrayOfBlock(view, config, group_blocks, static_cast<int64_t>(out.size()),
                             [&](uint8_t* pool, int64_t offset, int64_t bytes) {
                               return copy_bytes(out.data() + offset, pool, bytes);
                             });
}

Status WriteKvBlock(const KvCacheView& view, const ModelConfig& config,
                    std::span<const int64_t> group_blocks, std::span<const uint8_t> in,
                    const CopyBytes& copy_bytes) {
  return ForEachArrayOfBlock(view, config, group_blocks, static_cast<int64_t>(in.size()),
                             [&](uint8_t* pool, int64_t offset, int64_t bytes) {
                               return copy_bytes(pool, in.data() + offset, bytes);
                             });
}

BatchBuilder::BatchBuilder(int block_size, int64_t num_blocks, int num_kv_groups)
    : block_size_(block_size),
      num_blocks_(num_blocks),
      block_tables_(static_cast<size_t>(num_kv_groups)) {}

int BatchBuilder::AddSequence() {
  seqs_.emplace_back();
  return static_cast<int>(seqs_.size()) - 1;
}

Status BatchBuilder::Append(int seq, std::span<const int32_t> tokens, Logits logits) {
  if (seq < 0 || seq >= static_cast<int>(seqs_.size())) {
    return InvalidArgumentError("no sequence " + std::to_string(seq));
  }
  if (std::find(step_seqs_.begin(), step_seqs_.end(), seq) != step_seqs_.end()) {
    return InvalidArgumentError("sequence " + std::to_string(seq) + " is already in this step");
  }
  if (tokens.empty()) return InvalidArgumentError("a step needs at least one token per sequence");
  Sequence& s = seqs_[seq];
  const int64_t new_length = s.length + static_cast<int64_t>(tokens.size());
  const int64_t blocks_needed = (new_length + block_size_ - 1) / block_size_;
  const int64_t more = blocks_needed - static_cast<int64_t>(s.blocks.size());
  const int64_t fresh = std::max<int64_t>(0, more - static_cast<int64_t>(s.spare_blocks.size()));
  if (next_free_block_ + fresh > num_blocks_) {
    return ResourceExhaustedError("the KV cache has " + std::to_string(num_blocks_) +
                                  " blocks; this step needs more (use a larger cache)");
  }
  for (int64_t i = 0; i < more; ++i) {
    if (s.spare_blocks.empty()) {
      s.blocks.push_back(static_cast<int32_t>(next_free_block_++));
    } else {
      s.blocks.push_back(s.spare_blocks.back());
      s.spare_blocks.pop_back();
    }
  }
  step_seqs_.push_back(seq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool wants = logits == Logits::kAll || (logits == Logits::kLast && i + 1 == tokens.size());
    if (wants) logit_rows_.push_back(static_cast<int32_t>(token_ids_.size()));
    token_ids_.push_back(tokens[i]);
    positions_.push_back(s.length + static_cast<int32_t>(i));
  }
  blocks_.AddSequence(s.blocks, block_size_, s.length, static_cast<int32_t>(tokens.size()));
  s.length = static_cast<int32_t>(new_length);
  cu_seqlens_.push_back(static_cast<int32_t>(token_ids_.size()));
  return OkStatus();
}

Status BatchBuilder::Truncate(int seq, int32_t length) {
  if (seq < 0 || seq >= static_cast<int>(seqs_.size())) {
    return InvalidArgumentError("no sequence " + std::to_string(seq));
  }
  if (!step_seqs_.empty()) return FailedPreconditionError("Truncate between steps only");
  Sequence& s = seqs_[seq];
  if (length < 0 || length > s.length) {
    return InvalidArgumentError("cannot truncate a sequence of " + std::to_string(s.length) +
                                " tokens to " + std::to_string(length));
  }
  s.length = length;
  const size_t kept = static_cast<size_t>((length + block_size_ - 1) / block_size_);
  while (s.blocks.size() > kept) {
    s.spare_blocks.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
  return OkStatus();
}

RaggedBatch BatchBuilder::batch() {
  std::fill(block_tables_.begin(), block_tables_.end(), blocks_.table());
  return RaggedBatch{positions_, cu_seqlens_, block_tables_};
}

void BatchBuilder::Clear() {
  step_seqs_.clear();
  token_ids_.clear();
  positions_.clear();
  cu_seqlens_.assign(1, 0);
  logit_rows_.clear();
  blocks_.Clear();
}

}  // namespace tokenmill
