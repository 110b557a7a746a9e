// The batch and KV-cache views the forward pass runs over (DESIGN.md section 3, "Batch
// inputs"), and the attention kernels over them. The views own no memory.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "kernels/cpu/matmul.h"
#include "kernels/kv_type.h"

namespace tokenmill {

// One layer's K and V blocks, each laid out [block][offset in block][kv head][head_dim].
// With int8 (or fp8) K/V, k_scale and v_scale hold one float per [block][offset in block][kv
// head].
struct PagedKvLayer {
  KvType type = KvType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_blocks = 0;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float* k_scale = nullptr;  // int8 only
  float* v_scale = nullptr;  // int8 only
};

// Tokens of several sequences, concatenated (a ragged batch), with each sequence's block
// table in FlashInfer's paged_kv_t form. After this step sequence s holds
// (kv_indptr[s+1] - kv_indptr[s] - 1) * block_size + kv_last_block_len[s] tokens of K/V;
// each of its new tokens attends to the positions up to its own.
struct RaggedBatch {
  std::span<const int32_t> positions;          // per token
  std::span<const int32_t> cu_seqlens;         // n_seqs + 1: sequence s has tokens [cu[s], cu[s+1])
  std::span<const int64_t> slot_mapping;       // per token: block * block_size + offset of its K/V
  std::span<const int32_t> kv_indptr;          // n_seqs + 1, into kv_indices
  std::span<const int32_t> kv_indices;         // block ids, sequence after sequence
  std::span<const int32_t> kv_last_block_len;  // per sequence, in [1, block_size]

  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
};

// Checks that the batch is consistent: sizes, ranges, every block id < num_blocks, each
// token's position within its sequence's KV length and its slot where the block table
// puts that position.
Status ValidateRaggedBatch(const RaggedBatch& batch, int block_size, int64_t num_blocks);

// Writes each token's K and V rows (n_kv_heads * head_dim floats) into its slot; int8
// quantizes each (token, KV head) row with its own scale (QuantizeKvRowInt8).
void StoreKv(const PagedKvLayer& kv, std::span<const int64_t> slot_mapping, const float* k,
             const float* v);

// Symmetric int8 of one row of n values: returns scale = max|x| / 127 (0 for a zero row)
// and q[i] = round(x[i] / scale), so |x[i] - q[i] * scale| <= scale / 2.
float QuantizeKvRowInt8(const float* x, int64_t n, int8_t* q);

// With f16 K/V the query and the attention probabilities are rounded to f16 too, as the
// dot products take f16 operands, and the whole computation is llama.cpp's (non-flash CPU
// attention) bit for bit: see AttendF16LikeGgml in attend_impl.h.
//
// Causal attention of each token's n_heads query heads (row stride n_heads * head_dim)
// over its sequence's cached K/V at positions <= its own; one kernel for prefill chunks
// and decode. Query heads sharing a KV head (GQA) are processed together. int8 K/V rows
// are dequantized in registers (q · scale), never copied out at full precision.
void PagedAttention(const CpuContext& ctx, const PagedKvLayer& kv, const RaggedBatch& batch,
                    const float* q, int n_heads, float scale, float* out);

// The same computation in plain scalar code (double sums over each stored element
// converted to float): the oracle for tests. It also reads fp8 (E4M3 codes with int8's
// scale layout), which only the CUDA kernels use.
void PagedAttentionReference(const PagedKvLayer& kv, const RaggedBatch& batch, const float* q,
                             int n_heads, float scale, float* out);

}  // namespace tokenmill
