// The KV append and attention kernels over one layer's KV view and a ragged batch with its
// KV group's block table (the contract of kernels/paged_kv.h).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/matmul.h"
#include "kernels/kv_type.h"
#include "kernels/paged_kv.h"

namespace tokenmill {

// Writes each token's K and V rows (n_kv_heads * head_dim floats) into its slot (K's alone in
// a latent cache, KvCacheView::v_in_k, whose V is K's row); int8
// quantizes each (token, KV head) row with its own scale (QuantizeKvRowInt8), q4_0 and int4
// each block or group of it (QuantizeKvRowQ4_0, QuantizeKvRowInt4) after KvRotationOf's
// rotation.
void StoreKv(const KvCacheView& kv, std::span<const int64_t> slot_mapping, const float* k,
             const float* v);

// Symmetric int8 of one row of n values: returns scale = max|x| / 127 (0 for a zero row)
// and q[i] = round(x[i] / scale), so |x[i] - q[i] * scale| <= scale / 2.
float QuantizeKvRowInt8(const float* x, int64_t n, int8_t* q);

// llama.cpp's Q4_0 of a row of n values (a multiple of 32), bit for bit as its
// quantize_row_q4_0_ref: per block, d = (the value of largest magnitude) / -8 stored as f16 in
// scales[b], codes min(15, trunc(x / d + 8.5)) (with 1/d of the unrounded d), element j of the
// block in the low nibble of codes[16b + j] and element j + 16 in its high nibble.
void QuantizeKvRowQ4_0(const float* x, int64_t n, uint8_t* codes, uint16_t* scales);

// LMDeploy's asymmetric int4 of a row of n values (a multiple of kKvInt4Group): per group,
// scale = (max - min) / 15 and zero = min, both rounded to f16 (scales[2g], scales[2g + 1]),
// codes round((x - zero) / scale) in 0..15 packed as q4_0's (QuantizeKvRowQ4_0).
void QuantizeKvRowInt4(const float* x, int64_t n, uint8_t* codes, uint16_t* scales);

// llama.cpp's rotation of a quantized KV cache (its attn_rot, on for its quantized types):
// queries and keys pass through an orthonormal Walsh-Hadamard transform of the largest
// power-of-two block (64 or more) dividing head_dim, values through blocks of 64 and the
// attention output back through the same (H · H = I), so each block's outliers spread over
// its codes. Here for q4_0 and int4, K and V each by its own type; 0 where nothing is rotated
// (other types, heads not of whole 64s).
struct KvRotation {
  int keys = 0;
  int values = 0;
};
KvRotation KvRotationOf(KvType k_type, KvType v_type, int head_dim);
inline KvRotation KvRotationOf(KvType type, int head_dim) {
  return KvRotationOf(type, type, head_dim);
}

// Each block of n (a power of two) values of x[0, len) becomes H_n times it: Sylvester's
// Hadamard matrix (H_2s = [[H_s, H_s], [H_s, -H_s]]) over sqrt(n), as llama.cpp builds it.
void HadamardRotate(float* x, int64_t len, int n);

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
  // false: each token attends to every position of its sequence up to the last this batch
  // holds of it, later ones included (an encoder's bidirectional attention, bert).
  bool causal = true;
};

// With f16 K/V the query and the attention probabilities are rounded to f16 too, as the
// dot products take f16 operands, and the whole computation is llama.cpp's (non-flash CPU
// attention) bit for bit: see AttendF16LikeGgml in attend.inc. K and V may differ in type
// (KvCacheView::v_type): the query is rounded to f16 when K is f16, the probabilities when V
// is.
//
// Causal attention of each token's n_heads query heads (row stride n_heads * head_dim)
// over its sequence's cached K/V at positions <= its own (those of its window: `variant`),
// found through `table` (the block table of the layer's KV group in `batch`); one kernel for
// prefill chunks and decode. Query heads sharing a KV head (GQA) are processed together, and
// with f16 K/V on the SIMD tables those of a run of a sequence's consecutive tokens too (each
// K/V row read once for all of them; every token's sums as it alone would have them). int8
// K/V rows are dequantized in registers (q · scale), never copied out at full precision; a
// q4_0 (or int4) row is dequantized into one row of scratch and read as f32, the query
// rotated as its keys and the output rotated back (KvRotationOf).
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
