// The CPU kernels of one ISA as a table of functions, and the arguments they take. Everything
// that computes with vectors is reached through this table, which the per-ISA files fill
// (table_scalar.cc, table_avx2.cc, table_avx512.cc: only the last two are compiled with their
// target flags, and KernelTable (kernel_table.cc) hands them out after CpuSupports). The weight
// types are listed once for all three: their formats in weight_formats.inc, their entries in
// table_entries.inc; the two SIMD tables share their body, simd_table.inc.
//
// The route of a Q4_1 matmul of a decode step (one token), from the forward pass to the tile:
//  1. model/arch/cpu_blocks.cc: CpuForwardBlocks::MatmulOps (Q/K/V, gate/up) calls
//     MatmulMany, and CpuForwardBlocks::MatmulOp (O, down, the output) calls Matmul, with the
//     ForwardPass's CpuContext {&KernelTable(isa), pool} that its owner built (CpuBackend,
//     engine/forward_backend.cc). When the model loaded, Model::FromFile (model/model.cc) had
//     regrouped the Q4_1 matrices of 16n rows into the kRowGroups16 layout (RegroupRows,
//     row_groups.cc).
//  2. MatmulMany (matmul.cc) quantizes the token's activations once with the table's
//     `quantize` (SimdQuantizeActivations, activations_simd256.inc) and lays them out as
//     Q8TokenGroupBlock (GroupActivations); ParallelFor splits the rows of all the matrices into
//     units of 16, and each thread calls the table's q4_1 entry with a MatmulRange.
//  3. That entry, in table_avx512.cc, is QuantRange<Q4_1Format> (matmul_simd_ranges.inc, via
//     table_entries.inc);
//     Q4_1Format (quant_q4_1.inc) is the block layout and how its quants enter the dot products.
//  4. QuantRange hands a kRowGroups16 matrix to RowGroupsSimdRange<BlockQ4_1x16>
//     (matmul_row_groups.inc), which runs RowGroupTile<BlockQ4_1x16, 1>: 16 rows, one per
//     32-bit lane, against the token, 8 dpbusd per block. A matrix in the GGUF layout goes to
//     RunQuantGroup (matmul_simd_ranges.inc) and the tile QuantTile<Q4_1Format, 4, 1>
//     (matmul_simd256.inc): 4 rows × 1 token in ggml's order.
// The AVX2 table (table_avx2.cc) compiles the same files without VNNI (8 rows per row-group
// tile, 2 rows per QuantTile). The scalar table (table_scalar.cc) runs the same orders in plain
// loops (PlainQuantRange, matmul_scalar.inc; RowGroupsRange, matmul_row_groups.inc): the oracle
// the others are tested against.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/half.h"
#include "kernels/kv_type.h"

namespace tokenmill {

// What one ISA's matmul kernel computes: y[t * y_stride + r] for rows [row_begin, row_end)
// and every token t < n_tokens. `x` is float (cols per token) for F32/F16/BF16 weights,
// Q8KActivationBlock (cols / 256 per token) for the 256-element block types and
// Q8TokenGroupBlock (cols / 32 per group of kTokenGroup tokens) for the other quantized ones.
//
// Quantized weights accumulate each (row, token) in ggml's order (ggml_vec_dot_q4_1_q8_1
// and friends, AVX2 path): 8 float lanes, lane i the integer dot product of bytes
// 4i..4i+3 of a block; per block acc = fma(d_w · d_a, lanes, acc) and, for Q4_1,
// min += m_w · s_a; the result is the 8 lanes summed pairwise (4+4, 2+2, 1+1) plus min.
// Q5_0/Q5_1 run that order too; IQ4_NL and MXFP4 ggml's two-accumulator one (PairedBlocks
// below).
// Weights in the kRowGroups16 layout accumulate each (row, token) in one float instead: per
// block acc = fma(d_w · d_a, (float) Σ q_w · q_a, acc), then for Q4_1 acc = fma(m_w, s_a,
// acc) (the integer sum is exact): one conversion and one or two fmas per block where ggml's
// order needs a conversion and an fma of 8 lanes, so a many-token step runs ~2.2x faster
// (bench/matmul); results differ from ggml's in the last bits. Q5_0's row groups keep ggml's 8
// lanes per row (matmul_row_groups_q5_0.inc): bit-identical to its file layout, faster where a
// step is bound by reading the weights (one token), no faster at many tokens, where the 8
// lanes' conversions and fmas are the work in both layouts.
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
// heads sharing KV head `kv_head` attend over positions [begin, len) of the sequence whose
// blocks are `blocks` (begin > 0: a sliding window; the KV before it is never read). K/V rows
// are f16, f32, int8 (then k_scale/v_scale hold a float per (slot, KV head)) or q4_0 (an f16
// per block of 32 values: kv_cache_view.h). `scores` is
// group × (len - ScoresBase(begin)) scratch, position j of head g at g × that + j - base.
struct AttendArgs {
  const void* k;
  const void* v;
  KvType k_type;
  KvType v_type;
  const void* k_scale;
  const void* v_scale;
  int block_size;
  int n_kv_heads;
  int head_dim;
  const int32_t* blocks;
  int32_t begin = 0;
  int32_t len = 0;
  int kv_head;
  const float* q_group = nullptr;  // group × head_dim, already rounded to f16 when K is f16
  int group;
  float scale;
  float softcap;  // > 0: each score is softcap · tanh(score / softcap) before the scale
  const float* sinks;  // null, or the group's sink logits (AttentionVariant::sinks)
  float* scores = nullptr;
  float* out_group = nullptr;  // group × head_dim
};

// Memory the attend entry reuses from run to run (a worker's, over its chunk of runs): grown,
// never shrunk, not zeroed (the kernels write each element before they read it). Fresh
// buffers a run were mapped and unmapped each time: on 2 threads the TLB shootdowns cost more
// than the pass saved.
class AttendScratch {
 public:
  float* Floats(size_t n) { return Grow(floats_, floats_size_, n); }
  int64_t* Offsets(size_t n) { return Grow(offsets_, offsets_size_, n); }

 private:
  template <typename T>
  static T* Grow(std::unique_ptr<T[]>& buffer, size_t& size, size_t n) {
    if (n > size) {
      buffer.reset(new T[n]);
      size = n;
    }
    return buffer.get();
  }
  std::unique_ptr<float[]> floats_;
  size_t floats_size_ = 0;
  std::unique_ptr<int64_t[]> offsets_;
  size_t offsets_size_ = 0;
};

// Where a unit's scores start: the multiple of 8 at or before its first position, those
// before `begin` holding -inf (probability 0), so that the softmax sums the vectors of 8
// positions llama.cpp sums (its rows of KV cells start at position 0, masked cells -inf).
inline int32_t ScoresBase(int32_t begin) { return begin - begin % 8; }

// The score of a K·q dot product: soft-capped (gemma2, as llama.cpp: scale by 1 / softcap,
// tanh, scale by softcap), then times the attention scale (in the softmax, as llama.cpp).
inline float AttentionScore(const AttendArgs& a, float dot) {
  if (a.softcap > 0.0f) dot = std::tanh(dot * (1.0f / a.softcap)) * a.softcap;
  return dot * a.scale;
}

// Head g's sink logit, or -inf (a softmax without a sink: SoftmaxLikeGgml).
inline float SinkOf(const AttendArgs& a, int g) { return a.sinks ? a.sinks[g] : -INFINITY; }

// The kernels of one ISA. Each entry computes the same values in every table (a matmul's order
// depends only on the matrix's layout, see MatmulRange).
struct CpuKernelTable {
  CpuIsa isa;
  // The matmul of each weight type (MatmulMany picks by WeightMatrix::type).
  MatmulRangeFn f32, f16, bf16, q8_0, q4_0, q4_1;
  MatmulRangeFn q5_0, q5_1, iq4_nl, mxfp4;
  // The 256-element block types, whose `x` is Q8KActivationBlock (kernels/cpu/matmul_k_quant*.inc).
  MatmulRangeFn q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs;
  // QuantizeActivations and QuantizeActivationsQ8K.
  void (*quantize)(const float* x, int64_t n, Q8ActivationBlock* out);
  void (*quantize_q8k)(const float* x, int64_t n, Q8KActivationBlock* out);
  // A run of PagedAttention's units: consecutive tokens of one sequence, one KV head, whose
  // query heads may read each K/V row once; attend_run_tokens says how many tokens of a
  // GQA group's size and head size a run should hold.
  void (*attend)(std::span<const AttendArgs> run, AttendScratch& scratch);
  int (*attend_run_tokens)(int group, int head_dim);
  // SwiGlu and SoftmaxLikeGgml (elementwise.h).
  void (*swiglu)(const float* gate, const float* up, int64_t n_rows, int64_t row_size,
                 float* out);
  void (*softmax_like_ggml)(std::span<float> x, float sink);
  // GeluTanhGlu (elementwise.h).
  void (*gelu_tanh_glu)(const float* gate, const float* up, int64_t n, float* out);
  // AddLowRank (elementwise.h), with Bᵀ in f32 or in f16.
  void (*add_low_rank)(const float* coeffs, int64_t n_tokens, int64_t rank, const float* bt,
                       int64_t n, float* const* y);
  void (*add_low_rank_f16)(const float* coeffs, int64_t n_tokens, int64_t rank,
                           const uint16_t* bt, int64_t n, float* const* y);
};

namespace internal {

// Whether a weight format (quant_*.inc) sums its blocks in ggml_vec_dot_iq4_nl_q8_0's order
// (Format::kPairedBlocks): even and odd blocks in two sets of 8 lanes, added lane by lane before
// the pairwise sum, and the last block of an odd count added after it by AddLastBlock. A format
// that does not say runs the one-accumulator order of MatmulRange.
template <typename Format>
constexpr bool PairedBlocks() {
  if constexpr (requires { Format::kPairedBlocks; }) {
    return Format::kPairedBlocks;
  } else {
    return false;
  }
}

// A block's weight scale d_w: the f16 `d` unless its format says otherwise (Format::Scale:
// MXFP4's power of two).
template <typename Format>
float BlockScale(const typename Format::Block& b) {
  if constexpr (requires { Format::Scale(b); }) {
    return Format::Scale(b);
  } else {
    return HalfToFloat(b.d);
  }
}

// sum + d_w · d_a · Σ q_w · q_a for token t of `a`, as ggml's scalar tail adds a block: one fma
// (libggml-cpu is C compiled with contraction) of the exact scale product and integer sum.
template <typename Format>
float AddLastBlock(const typename Format::Block& w, const Q8TokenGroupBlock& a, int t,
                   float sum) {
  int32_t dot = 0;
  for (int j = 0; j < 32; ++j) dot += Format::Quant(w, j) * a.q[t][j];
  return std::fma(BlockScale<Format>(w) * a.d[t], static_cast<float>(dot), sum);
}

// The tables, one per file: table_scalar.cc, table_avx2.cc and table_avx512.cc.
const CpuKernelTable& ScalarKernelTable();
#if defined(__x86_64__)
const CpuKernelTable& Avx2KernelTable();
const CpuKernelTable& Avx512VnniKernelTable();
#endif

}  // namespace internal
}  // namespace tokenmill
