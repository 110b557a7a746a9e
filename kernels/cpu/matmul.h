// Matrix multiplication of activations by model weights: y = x · Wᵀ for several tokens.
// Weights stay in their file type (CpuTensorTypeNames) as views into the model file. For
// quantized weights the activations are quantized on the fly to int8 blocks, of 32
// (Q8ActivationBlock) or, for the 256-element block types (Q2_K..Q6_K, IQ4_XS), of 256
// (Q8KActivationBlock), so the dot products are integer ones.
//
// Determinism: the value of y[t][r] depends only on row r and token t, never on how many
// tokens run together or how rows are split over threads (the same instructions in the
// same order for every token), so batching and chunking do not change results.
//
// The kernels behind Matmul, one table per ISA, and the route of a matmul to them:
// kernel_table.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/tensor_type.h"

namespace tokenmill {

class ThreadPool;

// How a matrix's blocks lie in memory. kRows: as in the GGUF file, row after row.
// kRowGroups16 (Q4_1, Q8_0, Q5_0, made by RegroupRows in kernels/cpu/row_groups.h): rows in groups
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

// 256 activations as int8 with one float scale, ggml's block_q8_K (the activations of the
// 256-element block types, Q2_K..Q6_K and IQ4_XS): x[i] ≈ d * q[i], bsums[j] the sum of
// q[16j..16j+15].
inline constexpr int kQ8KBlock = 256;
struct Q8KActivationBlock {
  float d;
  int8_t q[kQ8KBlock];
  int16_t bsums[kQ8KBlock / 16];
};

// Quantizes n (a multiple of 256) floats into n / 256 blocks exactly as ggml's x86
// quantize_row_q8_K (its quantize_row_q8_K_ref): the element of largest |x|, max, sets
// q = min(127, round-half-even(x · (-127 / max))) and d = 1 / (-127 / max).
void QuantizeActivationsQ8K(const float* x, int64_t n, Q8KActivationBlock* out);

// Whether the activations get quantized for this weight type (to Q8ActivationBlock, or to
// Q8KActivationBlock where UsesQ8KActivations).
bool UsesQuantizedActivations(TensorType type);
bool UsesQ8KActivations(TensorType type);

// Whether the CPU computes with weights of `type`: the one place that decides which types a
// model may hold (the loader asks it). True exactly when the type has a reference
// dequantization (kernels/dequantize.h: token embeddings, norms) and a matmul in the kernel
// tables.
bool CpuComputesWith(TensorType type);

// The names of the types CpuComputesWith accepts, comma-separated ("f32, f16, ...").
std::string CpuTensorTypeNames();

// The kernels of one ISA (kernels/cpu/kernel_table.h).
struct CpuKernelTable;
// The table of `isa`; CHECKs that the CPU supports it.
const CpuKernelTable& KernelTable(CpuIsa isa);

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
// gate/up): the activations are quantized once per format the matrices take (mixed types
// may need both) and one parallel pass covers the rows of all, so threads meet once instead
// of once per matrix. ys[i] gets n_tokens × rows_i.
// Each output is computed exactly as Matmul computes it.
void MatmulMany(const CpuContext& ctx, std::span<const WeightMatrix* const> ws, const float* x,
                int64_t n_tokens, std::span<float* const> ys);

// One input's share of a MatmulGroups call: matrices ws (of x's cols) over n_tokens tokens of
// x, ys[i] getting n_tokens × rows_i.
struct MatmulGroup {
  std::span<const WeightMatrix* const> ws;
  const float* x;
  int64_t n_tokens;
  std::span<float* const> ys;
};

// Several MatmulMany calls over different inputs in one parallel pass (a mixture of experts'
// experts, each over the tokens routed to it): every input quantized once, then the rows of
// every matrix of every group spread over the threads together. Each output is computed
// exactly as Matmul computes it.
void MatmulGroups(const CpuContext& ctx, std::span<const MatmulGroup> groups);

// The reference: each weight row dequantized to float and dotted with float activations
// in a plain loop (no activation quantization). Slow; the oracle for tests. (The scalar
// kernel table is the bit-exact oracle of the ggml order for quantized weights.)
void MatmulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

}  // namespace tokenmill
