// The CUDA kernels' launchers. Each has the contract of its CPU counterpart in kernels/cpu/
// (same layouts, row-major float activations, one layer's KvCacheView of
// kernels/kv_cache_view.h), takes device pointers, enqueues on `stream` and returns the
// launch's error (cudaSuccess when enqueued). C++17 (nvcc) and plain C++ callers both include
// this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/lora_math.h"
#include "kernels/cuda/moe_math.h"
#include "kernels/kv_cache_view.h"

namespace tokenmill::cuda {

// A weight matrix in device memory: `rows` rows of `cols` elements in the GGUF type
// `type` (TensorType's numbering), row_bytes apart, in the device layout of weight_upload.h
// (the block-32 quantized types' rows packed, and the K-quants' with their scales unpacked); bf16
// is its dequantized copy (rows x cols bfloat16, row-major) for cuBLAS, or null.
// A mixture's experts (GGUF's 3-D ffn_*_exps) are one DeviceWeight of n_experts such matrices,
// expert e's rows at data + e * expert_bytes (no bf16 copy).
struct DeviceWeight {
  uint32_t type = 0;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  const uint16_t* bf16 = nullptr;
  int32_t n_experts = 1;
  int64_t expert_bytes = 0;
};

// The step's ragged batch on the device (RaggedBatch of kernels/paged_kv.h), plus each
// token's sequence and the attention's grid.
struct DeviceBatch {
  const int32_t* positions = nullptr;     // n_tokens
  const int32_t* seq_of_token = nullptr;  // n_tokens
  int64_t n_tokens = 0;
  int max_splits = 1;  // max over the tokens of NumSplits(position + 1): the split-K grid
  // Query tiles from BuildAttentionTiles (attention_tiles.h): (first token, count) pairs.
  const int32_t* tiles = nullptr;
  int64_t n_tiles = 0;
};

// One KV group's block tables on the device (KvBlockTable; the kernels derive each
// sequence's KV length from its tokens' positions, so kv_last_block_len stays on the host).
struct DeviceBlockTable {
  const int64_t* slot_mapping = nullptr;  // n_tokens
  const int32_t* kv_indptr = nullptr;     // n_seqs + 1
  const int32_t* kv_indices = nullptr;
};

// max_splits of a step's tokens (host positions).
int MaxSplits(const int32_t* positions, int64_t n_tokens);

// out[t] = dequantized row ids[t] of table (float, table.cols per row).
cudaError_t Embedding(const DeviceWeight& table, const int32_t* ids, int64_t n_tokens, float* out,
                      cudaStream_t stream);

// out[r] = x[src_r] / sqrt(mean(x[src_r]^2) + eps) * weight, src_r = rows ? rows[r] : r;
// squares summed in double as the CPU does.
cudaError_t RmsNorm(const float* x, const float* weight, const int32_t* rows, int64_t n_rows, int n,
                    float eps, float* out, cudaStream_t stream);

// Residual add fused with the next norm: x[r] += y[r]; out[r] = RmsNorm(x[r]) (one read of x
// and y, one write of x and out).
cudaError_t AddRmsNorm(float* x, const float* y, const float* weight, int64_t n_rows, int n,
                       float eps, float* out, cudaStream_t stream);

// x[i] += y[i].
cudaError_t AddInPlace(float* x, const float* y, int64_t n, cudaStream_t stream);

// Adds bias (n values) to each of n_rows rows.
cudaError_t AddBias(float* x, const float* bias, int64_t n_rows, int n, cudaStream_t stream);

// RoPE in place over n_heads heads per token row (ApplyRope). inv_freq[i] = base^(-2i/n_rot)
// in double (n_rot / 2 of them, from the host); factors: Llama 3 divisors or null.
struct DeviceRope {
  bool neox = false;
  int head_dim = 0;
  int n_rot = 0;
  float position_scale = 1.0f;
  const double* inv_freq = nullptr;
  const float* factors = nullptr;
  // YaRN (RopeYarnAngle; ext_factor 0: none) and the factor on cos and sin
  // (RopeCosSinScale).
  float ext_factor = 0.0f;
  float corr_low = 0.0f;
  float corr_high = 0.0f;
  float cos_sin_scale = 1.0f;
};
cudaError_t Rope(const DeviceRope& rope, const int32_t* positions, int64_t n_tokens, int n_heads,
                 float* x, cudaStream_t stream);

// out[a * out_a + b * out_b + j] = in[a * in_a + b * in_b + j] for a < n_a, b < n_b and
// j < width: rows of `width` floats gathered or scattered (multi-head latent attention's
// per-head views: [token][head] to [head][token] and back, a head's roped part). in and out
// must not overlap.
cudaError_t CopyStrided(const float* in, int64_t in_a, int64_t in_b, float* out, int64_t out_a,
                        int64_t out_b, int64_t n_a, int64_t n_b, int64_t width,
                        cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i] (out may alias gate).
cudaError_t SwiGlu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);

// Floats of GeluTanhGlu's table: one per f16 bit pattern.
constexpr int64_t kGeluTableSize = 65536;

// out[i] = GELU-tanh(gate[i]) * up[i] as the CPU's GeluTanhGlu (ggml's f16 table): 0 at
// gate <= -10, gate * up at gate >= 10, else table[f16 bits of gate] * up, where `table` holds
// the CPU's GELU of every f16 value (kGeluTableSize floats). out may alias gate.
cudaError_t GeluTanhGlu(const float* gate, const float* up, int64_t n, const float* table,
                        float* out, cudaStream_t stream);

// x[i] *= scale (Gemma's embeddings times sqrt(n_embd)).
cudaError_t ScaleInPlace(float* x, int64_t n, float scale, cudaStream_t stream);

// x[i] = tanh(x[i] * (1 / cap)) * cap (gemma2's final logit soft-capping, as the CPU's).
cudaError_t SoftcapInPlace(float* x, int64_t n, float cap, cudaStream_t stream);

// Writes each token's K and V rows (n_kv_heads * head_dim floats) into its slot (StoreKv);
// int8/fp8 quantize each (token, KV head) row with its own scale, bit for bit as
// QuantizeKvRow (so int8 equals the CPU's StoreKv); q4_0 and int4 each block of 32 of a row
// after the CPU's rotation (KvRotationOf), equal to the CPU's StoreKv (kernel_math.h; heads of
// a multiple of 32 up to kMaxHeadDim). K and V of one type (kv.v_type == kv.type). With
// kv.v_in_k only K is written (v is not read; 4-bit types refused).
cudaError_t StoreKv(const KvCacheView& kv, const int64_t* slot_mapping, int64_t n_tokens,
                    const float* k, const float* v, cudaStream_t stream);

// Floats of the split-K workspace PagedAttention needs; head_dim: the output's width a head
// (value_dim with v_in_k).
int64_t AttentionWorkspaceFloats(int64_t n_tokens, int n_heads, int head_dim, int max_splits);

// What some families change in attention (AttentionVariant of kernels/cpu/paged_attention.h,
// and the query scale their graphs apply after RoPE); the defaults change nothing.
struct DeviceAttentionVariant {
  // Each query element is multiplied by this (one rounding, as the CPU's q *= query_scale)
  // before its dot products; 1: as is.
  float query_scale = 1.0f;
  // > 0: each dot product is softcap * tanh(dot * (1 / softcap)) before `scale` (gemma2).
  float softcap = 0.0f;
  // > 0: each token attends only to its sliding_window most recent positions, its own
  // included; the KV before them is never read.
  int32_t sliding_window = 0;
  // Multi-head latent attention (kv.v_in_k): V is the first value_dim elements of each K row
  // (the latent, kv_lora_rank of them) and each head's output is value_dim wide; 0: V is the
  // whole row. 0 without v_in_k.
  int32_t value_dim = 0;
};

// Causal paged attention (PagedAttention of kernels/cpu): each token's n_heads query heads
// over its sequence's K/V at positions <= its own, found through `table` (the block tables
// of the layer's KV group); the query heads of a KV head together, positions split in
// chunks of SplitPositions(len) merged with online softmax (kernel_math.h). One kernel for
// decode and prefill chunks on top of a cached prefix; a token's result depends only on its
// own query and K/V, never on its tile. int8/fp8 K/V are dequantized in registers (code x
// row scale) as they are used, q4_0/int4 too (code and block scales), the query rotated as
// their keys and the output back as their values (KvRotationOf), as the CPU does.
// head_dim <= kMaxHeadDim, group <= kMaxGroup, K and V of one type; the tiles must come from
// BuildAttentionTiles with this group. With kv.v_in_k (multi-head latent attention: one K
// row a token, V its first variant.value_dim elements, n_kv_heads 1 for deepseek2) the wider
// instance (kernel_math.h: rows up to kMaxLatentHeadDim, a group of up to kMaxGroup heads or
// any multiple of kMaxTilePairs) reads V from the K tiles; out then holds value_dim floats a
// (token, head), and the KV types are f16, f32, int8 and fp8 (4-bit is refused).
// AttentionShapeFits says which shapes it takes.
cudaError_t PagedAttention(const KvCacheView& kv, const DeviceBatch& batch,
                           const DeviceBlockTable& table, const float* q, int n_heads,
                           float scale, float* workspace, float* out, cudaStream_t stream,
                           const DeviceAttentionVariant& variant = {});

// Bytes of the q8_1 activations of n_tokens rows of cols floats (Q8_1TokenBytes apart).
int64_t Q8_1Bytes(int64_t n_tokens, int64_t cols);

// x (n_tokens rows of cols floats, cols a multiple of 32) to q8_1 (mmvq_math.h), as the CPU's
// QuantizeActivations: the input of GemvQ8_1.
cudaError_t QuantizeQ8_1(const float* x, int64_t n_tokens, int64_t cols, uint8_t* out,
                         cudaStream_t stream);

// y[t * w.rows + r] = sum_c x[t * w.cols + c] * W[r][c] for the block-32 quantized weights
// (Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL: IsQuantized) and the K-quants (gemv_kquant.cu)
// over x's q8_1 activations (QuantizeQ8_1, 16-byte aligned): integer dot products, each (t, r)
// equal to MmvqDot (KMmvqDot for the K-quants, mmvq_kquant_math.h) bit for bit whatever the
// batch.
cudaError_t GemvQ8_1(const DeviceWeight& w, const uint8_t* x_q8, int64_t n_tokens, float* y,
                     cudaStream_t stream);

// The same for f32 / f16 / bf16 weights over float x: one warp per row, fixed order per (t, r).
cudaError_t Gemv(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                 cudaStream_t stream);

// ---- mixtures of experts (moe.cu, moe_math.h) ------------------------------------------------

// Each token's experts and weights from its router logits (n_tokens rows of r.n_expert,
// overwritten by the probs): RouteTokenOnDevice, one thread a token. experts, weights: n_tokens
// rows of r.n_used.
cudaError_t RouteTokens(const DeviceRouting& r, float* logits, int64_t n_tokens, int32_t* experts,
                        float* weights, cudaStream_t stream);

// A step's (token, choice) pairs grouped by expert on the device, as ExpertGroups::Build
// (moe_math.h's CountExpertPairs, ScanExpertCounts, PlaceExpertPairs): begin (n_expert + 1),
// order and slot_of_pair (n_pairs each). One block; no host sync.
struct DeviceExpertGroups {
  int32_t* begin = nullptr;
  int32_t* order = nullptr;
  int32_t* slot_of_pair = nullptr;
  int32_t n_expert = 0;
  int32_t n_used = 0;
  int64_t n_tokens = 0;  // pairs: n_tokens * n_used; no group is larger than n_tokens
};
cudaError_t GroupExpertPairs(const int32_t* experts, const DeviceExpertGroups& g,
                             cudaStream_t stream);
// Groups of g.n_tokens slots each, expert e's slots [e * n_tokens, (e + 1) * n_tokens): g.begin
// alone (order and slot_of_pair are not written), for the grouped GEMVs of per_token false
// over rows laid out expert after expert (multi-head latent attention's heads: each head's
// k_b or v_b over its n_tokens rows).
cudaError_t UniformExpertGroups(const DeviceExpertGroups& g, cudaStream_t stream);

// The grouped expert GEMV: for each slot s of expert e (g.begin), y[s * w.rows + r] = row r of
// expert e's matrix (w: w.n_experts == g.n_expert stacked matrices) times activation row
// order[s] / n_used of x (per_token: x has one row per token, the gate and up projections) or
// row s (the down projection over the slots' activations). Each expert's rows multiply its
// tokens together, up to PlanMmvq(w.rows, g.n_tokens)'s tokens a pass, and only experts with
// slots are read; each (slot, row) equals GemvQ8_1's (MmvqDot / KMmvqDot) of that expert and
// activation row bit for bit, whatever else is grouped with it. The grid is the worst case
// (every token on one expert): one CUDA graph per step shape.
cudaError_t GroupedGemvQ8_1(const DeviceWeight& w, const uint8_t* x_q8, bool per_token,
                            const DeviceExpertGroups& g, float* y, cudaStream_t stream);
// The same for f32 / f16 / bf16 experts over float x (Gemv's arithmetic).
cudaError_t GroupedGemv(const DeviceWeight& w, const float* x, bool per_token,
                        const DeviceExpertGroups& g, float* y, cudaStream_t stream);

// out[t * d + j] = CombineExperts (each token's choices in order) over expert_out (one row of d
// per slot) and weights (n_tokens rows of n_used); with a shared expert (shared_out: n_tokens
// rows of d, shared_gate: one logit a token; else null), plus shared_out * SharedExpertGate,
// or plus shared_out as it is where shared_gate is null (deepseek2's ungated shared experts).
// RouteTokens' r.selection_bias is device memory.
cudaError_t CombineExpertOutputs(const float* expert_out, const float* weights,
                                 const int32_t* slot_of_pair, int64_t n_tokens, int n_used,
                                 int64_t d, const float* shared_out, const float* shared_gate,
                                 float* out, cudaStream_t stream);

// LoRA updates of one base matrix of `rows` outputs and `cols` inputs for a step's tokens, each
// by its own adapter (kernels/cuda/lora_math.h): token t's slot s = token_slots[t] (negative:
// none) picks pairs[s] (device memory; rank 0: the adapter leaves the matrix alone), whose rank
// is at most max_rank. LoraShrink: mid[t * max_rank + k] = A_s[k] · x[t] for k < rank;
// LoraExpand: y[t * rows + r] += scale_s · Σ_k mid[t * max_rank + k] · Bᵀ_s[k][r]. Rows of other
// tokens are left as they are, bit for bit.
cudaError_t LoraShrink(const float* x, int64_t n_tokens, int64_t cols,
                       const int32_t* token_slots, const DeviceLoraPair* pairs, int max_rank,
                       float* mid, cudaStream_t stream);
cudaError_t LoraExpand(const float* mid, int64_t n_tokens, int64_t rows,
                       const int32_t* token_slots, const DeviceLoraPair* pairs, int max_rank,
                       float* y, cudaStream_t stream);

// Dequantizes all of w into bfloat16 (rows x cols, row-major; FloatToBf16Bits).
cudaError_t DequantizeToBf16(const DeviceWeight& w, uint16_t* out, cudaStream_t stream);

// out[i] = FloatToBf16Bits(x[i]) (round to nearest even).
cudaError_t FloatToBf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);

// out[r] = the index of the largest of row r's n_vocab logits (the first one on ties).
cudaError_t ArgmaxRows(const float* logits, int64_t n_rows, int n_vocab, int32_t* out,
                       cudaStream_t stream);

}  // namespace tokenmill::cuda
