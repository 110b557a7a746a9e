// The batch/KV contract of every device's kernels and forward pass (docs/design.md section 3,
// "Batch inputs"): a step's tokens as a ragged batch and, per KV group, the block tables
// that place their K/V in a KvCacheView's blocks (kernels/kv_cache_view.h). A KV group is
// the layers that share block tables: one today; a model with sliding-window and
// full-attention layers has one of each, and each layer reads its own group's tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/kv_cache_view.h"

namespace tokenmill {

// One KV group's block tables for a step in FlashInfer's paged_kv_t form, and where each
// new token's K/V goes. After the step sequence s holds
// (kv_indptr[s+1] - kv_indptr[s] - 1) * block_size + kv_last_block_len[s] tokens of K/V.
struct KvBlockTable {
  std::span<const int64_t> slot_mapping;       // per token: block * block_size + offset of its K/V
  std::span<const int32_t> kv_indptr;          // n_seqs + 1, into kv_indices
  std::span<const int32_t> kv_indices;         // block ids, sequence after sequence
  std::span<const int32_t> kv_last_block_len;  // per sequence, in [1, block_size]
};

// Tokens of several sequences, concatenated (a ragged batch); each new token attends to the
// positions of its sequence up to its own.
struct RaggedBatch {
  std::span<const int32_t> positions;   // per token
  std::span<const int32_t> cu_seqlens;  // n_seqs + 1: sequence s has tokens [cu[s], cu[s+1])
  std::span<const KvBlockTable> block_tables;  // per KV group

  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
};

// Checks that the batch is consistent: sizes, ranges and, in every KV group, every block id
// < num_blocks, each token's position within its sequence's KV length and its slot where the
// block table puts that position.
Status ValidateRaggedBatch(const RaggedBatch& batch, int block_size, int64_t num_blocks);
// The same with each KV group's own pool size: group_num_blocks[g] for block_tables[g].
Status ValidateRaggedBatch(const RaggedBatch& batch, int block_size,
                           std::span<const int64_t> group_num_blocks);

// Holds one KV group's block tables while a step is built, sequence after sequence.
class KvBlockTableBuilder {
 public:
  // Adds the step's next sequence: num_new tokens at positions [first_position,
  // first_position + num_new), held with those before them by `blocks`, exactly the blocks
  // that first_position + num_new tokens fill.
  void AddSequence(std::span<const int32_t> blocks, int block_size, int32_t first_position,
                   int32_t num_new);
  // Views of the tables (valid until the next AddSequence or Clear).
  KvBlockTable table() const;
  // Empties the tables for the next step.
  void Clear();

 private:
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> kv_indptr_{0};
  std::vector<int32_t> kv_indices_;
  std::vector<int32_t> kv_last_block_len_;
};

}  // namespace tokenmill
