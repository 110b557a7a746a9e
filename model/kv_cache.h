// KV memory for the forward pass, and a small builder of ragged-batch inputs over it.
// The engine will own its own pool and cache manager; these serve the CLI and tests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/paged_attention.h"
#include "model/config.h"

namespace tokenmill {

// Every layer's K and V blocks: K is [layer][block][offset][kv head][head_dim], V alike.
// int8 adds k_scale and v_scale, [layer][block][offset][kv head] floats. Non-owning.
struct KvCacheView {
  KvType type = KvType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_blocks = 0;
  int block_size = 0;
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float* k_scale = nullptr;  // int8 only
  float* v_scale = nullptr;  // int8 only

  PagedKvLayer Layer(int layer) const;
};

// Owns zeroed K/V memory (and int8 scales) of num_blocks blocks for a model.
class KvCacheStorage {
 public:
  KvCacheStorage(const ModelConfig& config, KvType type, int64_t num_blocks, int block_size);
  KvCacheView view();

 private:
  KvCacheView view_;
  std::vector<uint8_t> k_;
  std::vector<uint8_t> v_;
  std::vector<float> k_scale_;
  std::vector<float> v_scale_;
};

// Sequences that take fresh blocks from a bump allocator, and the step inputs for them.
class BatchBuilder {
 public:
  BatchBuilder(int block_size, int64_t num_blocks);

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
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> kv_indptr_, kv_indices_, kv_last_block_len_;
};

}  // namespace tokenmill
