// The KV append and attention kernels over one layer's KV view and a ragged batch with its
// KV group's block table (the contract of kernels/paged_kv.h).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/matmul.h"
#include "kernels/kv_type.h"
#include "kernels/paged_kv.h"

namespace tokenmill {

// Writes each token's K and V rows (n_kv_heads * head_dim floats) into its slot; int8
// quantizes each (token, KV head) row with its own scale (QuantizeKvRowInt8).
void StoreKv(const KvCacheView& kv, std::span<const int64_t> slot_mapping, const float* k,
             const float* v);

// Symmetric int8 of one row of n values: returns scale = max|x| / 127 (0 for a zero row)
// and q[i] = round(x[i] / scale), so |x[i] - q[i] * scale| <= scale / 2.
float QuantizeKvRowInt8(const float* x, int64_t n, int8_t* q);

// What some families change in attention (all off by default).
struct AttentionVariant {
  // > 0: each score is softcap · tanh(score / softcap) before the scale (gemma2's
  // attn_logit_softcapping).
  float softcap = 0.0f;
  // > 0: each token attends only to its sliding_window most recent positions, its own
  // included (llama.cpp's LLAMA_SWA_TYPE_STANDARD); the KV before them is never read.
  int32_t sliding_window = 0;
  // Non-empty: one learned logit per query head (n_heads of them, gpt-oss's attn_sinks) that
  // joins each softmax as a position with no value, as ggml_soft_max_add_sinks: the max and
  // the sum take it, the outputs are the visible positions' probabilities times V.
  std::span<const float> sinks;
};

// With f16 K/V the query and the attention probabilities are rounded to f16 too, as the
// dot products take f16 operands, and the whole computation is llama.cpp's (non-flash CPU
// attention) bit for bit: see AttendF16LikeGgml in attend.inc.
//
// Causal attention of each token's n_heads query heads (row stride n_heads * head_dim)
// over its sequence's cached K/V at positions <= its own (those of its window: `variant`),
// found through `table` (the block table of the layer's KV group in `batch`); one kernel for
// prefill chunks and decode. Query heads sharing a KV head (GQA) are processed together. int8 K/V rows
// are dequantized in registers (q · scale), never copied out at full precision.
void PagedAttention(const CpuContext& ctx, const KvCacheView& kv, const RaggedBatch& batch,
                    const KvBlockTable& table, const float* q, int n_heads, float scale,
                    float* out, const AttentionVariant& variant = {});

// The same computation in plain scalar code (double sums over each stored element
// converted to float): the oracle for tests. It also reads fp8 (E4M3 codes with int8's
// scale layout), which only the CUDA kernels use.
void PagedAttentionReference(const KvCacheView& kv, const RaggedBatch& batch,
                             const KvBlockTable& table, const float* q, int n_heads,
                             float scale, float* out, const AttentionVariant& variant = {});

}  // namespace tokenmill
