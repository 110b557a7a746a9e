#include "model/kv_cache.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/check.h"
#include "kernels/kv_type.h"
#include "model/forward_input.h"

namespace tokenmill {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, KvType type, int64_t num_blocks,
                               int block_size, std::optional<KvType> v_type)
    : KvCacheStorage(config, type, std::vector<int64_t>(NumKvGroups(config), num_blocks),
                     block_size, v_type) {}

KvCacheStorage::KvCacheStorage(const ModelConfig& config, KvType type,
                               std::span<const int64_t> group_num_blocks, int block_size,
                               std::optional<KvType> v_type) {
  TM_CHECK_EQ(static_cast<int>(group_num_blocks.size()), NumKvGroups(config));
  // MLA's latent cache has no V of its own (KvCacheView::v_in_k).
  const bool v_in_k = config.HasLatentKv();
  TM_CHECK(!v_in_k || v_type.value_or(type) == type) << "a latent KV cache has one type";
  const KvType v = v_type.value_or(type);
  // One side's codes and scales of `rows` rows of head_dim (new[]'s alignment holds floats).
  const auto allocate = [&](KvType side, int64_t rows, int head_dim, void*& codes_at,
                            void*& scales_at) {
    const Status fits = CheckKvTypeFits(side, head_dim);
    TM_CHECK(fits.ok()) << fits.ToString();
    codes_at = arrays_.emplace_back(static_cast<size_t>(rows * KvRowBytes(side, head_dim)), 0)
                   .data();
    const int64_t scale_bytes = rows * KvRowScaleBytes(side, head_dim);
    if (scale_bytes > 0) {
      scales_at = arrays_.emplace_back(static_cast<size_t>(scale_bytes), 0).data();
    }
  };
  layer_views_.resize(static_cast<size_t>(config.n_layers));
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

Status CopyKvBlocks(const KvCacheView& view, const ModelConfig& config,
                    std::span<const KvBlockCopy> copies, const CopyBytes& copy_bytes) {
  for (const KvBlockCopy& copy : copies) {
    if (copy.group < 0 || copy.group >= NumKvGroups(config)) {
      return InvalidArgumentError("a KV block copy names group " + std::to_string(copy.group) +
                                  ", which this model does not have");
    }
    for (int layer = 0; layer < config.n_layers; ++layer) {
      if (KvGroupOfLayer(config, layer) != copy.group || !config.StoresKv(layer)) continue;
      const KvCacheView kv = view.Layer(layer);
      const int64_t rows_per_block = int64_t{kv.block_size} * kv.n_kv_heads;
      const int64_t k_bytes = rows_per_block * KvRowBytes(kv.type, kv.head_dim);
      // V within K (MLA) moves with it.
      const int64_t v_bytes = kv.v_in_k ? 0 : rows_per_block * KvRowBytes(kv.v_type, kv.head_dim);
      const int64_t k_scale_bytes = rows_per_block * KvRowScaleBytes(kv.type, kv.head_dim);
      const int64_t v_scale_bytes =
          kv.v_in_k ? 0 : rows_per_block * KvRowScaleBytes(kv.v_type, kv.head_dim);
      if (copy.src < 0 || copy.dst < 0 || copy.src >= kv.num_blocks || copy.dst >= kv.num_blocks) {
        return InvalidArgumentError("a KV block copy from " + std::to_string(copy.src) + " to " +
                                    std::to_string(copy.dst) + " is outside the pool of " +
                                    std::to_string(kv.num_blocks) + " blocks");
      }
      const auto at = [](void* base, int64_t block, int64_t bytes) {
        return static_cast<uint8_t*>(base) + block * bytes;
      };
      for (const auto& [data, bytes] : {std::pair{kv.k, k_bytes}, std::pair{kv.v, v_bytes},
                                        std::pair{kv.k_scale, k_scale_bytes},
                                        std::pair{kv.v_scale, v_scale_bytes}}) {
        if (bytes == 0) continue;
        TM_RETURN_IF_ERROR(copy_bytes(at(data, copy.dst, bytes), at(data, copy.src, bytes), bytes));
      }
    }
  }
  return OkStatus();
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
