// Matrix multiplication of activations by model weights: y = x · Wᵀ for several tokens.
// Weights stay in their file type (F32, F16, BF16, Q8_0, Q4_0, Q4_1) as views into the
// model file. For quantized weights the activations are quantized on the fly to int8
// blocks of 32 (Q8ActivationBlock) so the dot products are integer ones.
//
// Determinism: the value of y[t][r] depends only on row r and token t, never on how many
// tokens run together or how rows are split over threads (the same instructions in the
// same order for every token), so batching and chunking do not change results.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/cpu_features.h"
#include "kernels/kv_type.h"
#include "kernels/tensor_type.h"

namespace tokenmill {

class ThreadPool;

// How a matrix's blocks lie in memory. kRows: as in the GGUF file, row after row.
// kRowGroups16 (Q4_1 and Q8_0, made by RegroupRows in kernels/cpu/row_groups.h): rows in groups
// of 16, each block of a group's 16 rows interleaved so that one 512-bit vector holds one
// column chunk of all 16 rows; a group takes 16 * row_bytes bytes, as in kRows.
enum class WeightLayout : uint8_t { kRows, kRowGroups16 };

// `rows` rows of `cols` elements each, `row_bytes` apart (a GGUF tensor of shape
// [cols, rows] in ggml order). Non-owning.
struct WeightMatrix {
  TensorType type = TensorType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  WeightLayout layout = WeightLayout::kRows;
};

// 32 activations as int8 with their scale d: x[i] ≈ d * q[i]; sum = Σ q[i], and
// scaled_sum ≈ d * sum (for the minimum term of Q4_1 weights).
struct Q8ActivationBlock {
  float d;
  float scaled_sum;
  int32_t sum;
  int8_t q[32];
};

// Quantizes n (a multiple of 32) floats into n / 32 blocks exactly as ggml's x86
// quantize_row_q8_1 does (amax, d = amax / 127, q = round-half-even(x · 127 / amax), d and
// d · Σq rounded to f16), so the quantized matmuls can match llama.cpp bit for bit.
void QuantizeActivations(const float* x, int64_t n, Q8ActivationBlock* out);

// The activations of a group of up to kTokenGroup tokens for one block of 32 columns, laid
// out for the kernels: each token's quants, then the tokens' scales d and sums d · Σq side
// by side, so that one vector multiply gives d_w · d_a for all 8 tokens and one vector fma
// their Q4_1 minimum terms; and the integer sums Σq (regrouped Q8_0 weights are stored + 128,
// unsigned, and take 128 · Σq back off). Tokens past the end are zero.
inline constexpr int kTokenGroup = 8;
struct Q8TokenGroupBlock {
  int8_t q[kTokenGroup][32];
  float d[kTokenGroup];
  float scaled_sum[kTokenGroup];
  int32_t sum[kTokenGroup];
};

// Regroups per-token blocks (n_tokens × blocks, token-major) into
// ceil(n_tokens / kTokenGroup) × blocks group blocks (group-major).
void GroupActivations(const Q8ActivationBlock* x, int64_t n_tokens, int64_t blocks,
                      Q8TokenGroupBlock* out);

// What one ISA's kernel computes: y[t * y_stride + r] for rows [row_begin, row_end) and
// every token t < n_tokens. `x` is float (cols per token) for F32/F16/BF16 weights and
// Q8TokenGroupBlock (cols / 32 per group of kTokenGroup tokens) for quantized ones.
//
// Quantized weights accumulate each (row, token) in ggml's order (ggml_vec_dot_q4_1_q8_1
// and friends, AVX2 path): 8 float lanes, lane i the integer dot product of bytes
// 4i..4i+3 of a block; per block acc = fma(d_w · d_a, lanes, acc) and, for Q4_1,
// min += m_w · s_a; the result is the 8 lanes summed pairwise (4+4, 2+2, 1+1) plus min.
// Weights in the kRowGroups16 layout accumulate each (row, token) in one float instead: per
// block acc = fma(d_w · d_a, (float) Σ q_w · q_a, acc), then for Q4_1 acc = fma(m_w, s_a,
// acc) (the integer sum is exact): one conversion and one or two fmas per block where ggml's
// order needs a conversion and an fma of 8 lanes, so a many-token step runs ~2.2x faster
// (bench/matmul); results differ from ggml's in the last bits.
struct MatmulRange {
  const WeightMatrix* w;
  const void* x;
  int64_t n_tokens;
  float* y;
  int64_t y_stride;
  int64_t row_begin;
  int64_t row_end;
};
using MatmulRangeFn = void (*)(const MatmulRange&);

// One (token, KV head) unit of paged attention (paged_attention.h): the `group` query
// heads sharing KV head `kv_head` attend over positions [0, len) of the sequence whose
// blocks are `blocks`. K/V rows are f16, f32 or int8 (then k_scale/v_scale hold a scale
// per (slot, KV head)). `scores` is group × len scratch.
struct AttendArgs {
  const void* k;
  const void* v;
  KvType kv_type;
  const float* k_scale;
  const float* v_scale;
  int block_size;
  int n_kv_heads;
  int head_dim;
  const int32_t* blocks;
  int32_t len;
  int kv_head;
  const float* q_group;  // group × head_dim, already rounded to f16 when K/V are f16
  int group;
  float scale;
  float* scores;
  float* out_group;  // group × head_dim
};

// The kernels of one ISA.
struct CpuKernelTable {
  CpuIsa isa;
  MatmulRangeFn f32, f16, bf16, q8_0, q4_0, q4_1;
  // Attention helpers over KV rows stored as f16 or f32.
  float (*dot_f16)(const float* a, const uint16_t* b, int64_t n);
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  void (*axpy_f16)(float alpha, const uint16_t* x, float* y, int64_t n);  // y += alpha * x
  void (*axpy_f32)(float alpha, const float* x, float* y, int64_t n);
  void (*attend)(const AttendArgs& args);
  // QuantizeActivations, bit-identical on every ISA.
  void (*quantize)(const float* x, int64_t n, Q8ActivationBlock* out);
};

// The table of `isa`; CHECKs that the CPU supports it.
const CpuKernelTable& KernelTable(CpuIsa isa);
// Whether `type` activations get quantized to Q8ActivationBlock for this weight type.
bool UsesQuantizedActivations(TensorType type);

// How the CPU kernels run: which ISA and which threads (pool may be null: one thread).
struct CpuContext {
  const CpuKernelTable* kernels;
  ThreadPool* pool = nullptr;
};

// y[t * w.rows + r] = Σ_c x[t * w.cols + c] · W[r][c] for t < n_tokens, with the fast
// kernels of ctx. Threads split the rows.
void Matmul(const CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t n_tokens,
            float* y);

// Several matrices with the same number of columns over the same activations (Q/K/V,
// gate/up): the activations are quantized once and one parallel pass covers the rows of
// all, so threads meet once instead of once per matrix. ys[i] gets n_tokens × rows_i.
// Each output is computed exactly as Matmul computes it.
void MatmulMany(const CpuContext& ctx, std::span<const WeightMatrix* const> ws, const float* x,
                int64_t n_tokens, std::span<float* const> ys);

// The reference: each weight row dequantized to float and dotted with float activations
// in a plain loop (no activation quantization). Slow; the oracle for tests. (The scalar
// kernel table is the bit-exact oracle of the ggml order for quantized weights.)
void MatmulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

}  // namespace tokenmill
