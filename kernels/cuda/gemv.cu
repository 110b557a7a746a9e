// Matrix-vector products for decode (Matmul of kernels/cpu/matmul.h). Quantized weights
// (Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL, packed: mmvq_math.h) in llama.cpp's MMVQ style:
// activations quantized to q8_1 as the CPU quantizes them, each lane reading 16-byte words of
// weights, turning them into int8 quants with a few bit operations and multiplying them by
// __dp4a, a warp computing rows_per_warp rows for up to 8 tokens (PlanMmvq), so a word
// is read once per pass; MmvqDot is the host emulation, bit for bit. Float weights (f32, f16,
// bf16): one warp per row with float activations. Every (token, row) sum has the same order
// whatever the batch.
#include "kernels/cuda/gemv_kquant.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmvq_launch.cuh"
#include "kernels/cuda/mmvq_math.h"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::kWarp;
using internal::LaunchMmvqPlan;
using internal::WarpSum;
using internal::MmvqTile;
using internal::MmvqTileOf;
using internal::MmvqInputRow;
using internal::MmvqRows;
using internal::StoreWarpSums;

__global__ void QuantizeQ8_1Kernel(const float* x, int64_t n_tokens, int64_t cols, uint8_t* out) {
  const int64_t blocks = cols / kQuantBlock;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < n_tokens * blocks; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / blocks, b = e % blocks;
    uint8_t* token = out + t * Q8_1TokenBytes(cols);
    float ds[2];
    QuantizeQ8_1Block(x + t * cols + b * kQuantBlock,
                      reinterpret_cast<int8_t*>(token + b * kQuantBlock), ds);
    reinterpret_cast<float2*>(token + cols)[b] = make_float2(ds[0], ds[1]);
  }
}

// Σ q_w q_a over one 16-byte word of weights and its activations (a: 2 words for a 4- or 5-bit
// block, 1 for half a Q8_0 block), with each int of the word turned into int8 quants: Q4_0's
// nibbles minus 8 per byte, Q5_x's with their fifth bits (FiveBitQuants), IQ4_NL's levels
// (Iq4NlQuants); the sums stay exact integers.
template <uint32_t kType>
__device__ int32_t WordDot(const int4 w, uint32_t fifth, const int4* a) {
  const int wv[4] = {w.x, w.y, w.z, w.w};
  if constexpr (kType == kWQ8_0) {
    const int av[4] = {a[0].x, a[0].y, a[0].z, a[0].w};
    int32_t sum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) sum = __dp4a(wv[k], av[k], sum);
    return sum;
  } else {
    const int lo[4] = {a[0].x, a[0].y, a[0].z, a[0].w};
    const int hi[4] = {a[1].x, a[1].y, a[1].z, a[1].w};
    int32_t sum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const unsigned bits = static_cast<unsigned>(wv[k]);
      unsigned q_lo, q_hi;
      if constexpr (HasFifthBits(kType)) {
        q_lo = FiveBitQuants(kType, bits, fifth, k, false);
        q_hi = FiveBitQuants(kType, bits, fifth, k, true);
      } else if constexpr (kType == kWIQ4_NL) {
        Iq4NlQuants(bits, &q_lo, &q_hi);
      } else {
        const unsigned offset = kType == kWQ4_0 ? 0x08080808u : 0u;
        q_lo = __vsub4(bits & 0x0f0f0f0fu, offset);
        q_hi = __vsub4((bits >> 4) & 0x0f0f0f0fu, offset);
      }
      sum = __dp4a(static_cast<int>(q_lo), lo[k], sum);
      sum = __dp4a(static_cast<int>(q_hi), hi[k], sum);
    }
    return sum;
  }
}

template <uint32_t kType, int kTokens, int kRows>
__global__ void __launch_bounds__(kMmvqWarps * kWarp)
    MmvqKernel(DeviceWeight w, const uint8_t* x_q8, int64_t n_tokens, float* y, MmvqRows g) {
  constexpr int kActWords = kType == kWQ8_0 ? 1 : 2;
  const MmvqTile tile = MmvqTileOf<kTokens, kRows>(n_tokens, w.data, g);
  if (tile.r0 >= w.rows || tile.n_t <= 0) return;  // whole warps leave together
  const int lane = tile.lane;
  const int64_t r0 = tile.r0, t0 = tile.t0;
  const int n_t = tile.n_t;
  const int64_t words = PackedWords(kType, w.cols);
  const int64_t token_bytes = Q8_1TokenBytes(w.cols);
  const uint8_t* xs[kTokens];
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
    xs[tt] = tt < n_t ? x_q8 + MmvqInputRow(g, t0 + tt) * token_bytes : x_q8;
  }
  float acc[kRows][kTokens];
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) acc[rr][tt] = 0.0f;
  }
  for (int64_t wd = lane; wd < words; wd += kWarp) {
    const int64_t first = wd * WordElements(kType);
    int4 a[kTokens][kActWords];
    float ds[kTokens][2];
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      if (tt >= n_t) break;
      const uint8_t* token = xs[tt];
      const int4* words_a = reinterpret_cast<const int4*>(token + first);
#pragma unroll
      for (int i = 0; i < kActWords; ++i) a[tt][i] = words_a[i];
      const float2 s = reinterpret_cast<const float2*>(token + w.cols)[first / kQuantBlock];
      ds[tt][0] = s.x;
      ds[tt][1] = s.y;
    }
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      if (r0 + rr >= w.rows) break;
      const uint8_t* row = tile.data + (r0 + rr) * w.row_bytes;
      const int4 q = reinterpret_cast<const int4*>(row)[wd];
      const uint32_t fifth = HasFifthBits(kType) ? PackedFifthBits(kType, row, w.cols, wd) : 0u;
      float d, m;
      WordScales(kType, row, w.cols, wd, &d, &m);
#pragma unroll
      for (int tt = 0; tt < kTokens; ++tt) {
        if (tt >= n_t) break;
        acc[rr][tt] = MmvqStep(kType, acc[rr][tt], WordDot<kType>(q, fifth, a[tt]), d, m, ds[tt]);
      }
    }
  }
  StoreWarpSums(acc, tile, w.rows, y);
}

template <uint32_t kType>
cudaError_t LaunchMmvq(const DeviceWeight& w, const uint8_t* x_q8, int64_t n_tokens, float* y,
                       const MmvqRows& g, int64_t grid_z, cudaStream_t stream) {
  return LaunchMmvqPlan(
      w.rows, n_tokens,
      [&](dim3 grid, int threads, auto tokens, auto rows) {
        MmvqKernel<kType, decltype(tokens)::value, decltype(rows)::value>
            <<<grid, threads, 0, stream>>>(w, x_q8, n_tokens, y, g);
      },
      grid_z);
}

// One warp a row (kRows = 1 of MmvqTileOf's tile, kGemvWarps warps a block as kMmvqWarps).
static_assert(kGemvWarps == kMmvqWarps, "the float GEMV shares the MMVQ tile");

__global__ void __launch_bounds__(kGemvWarps * kWarp)
    FloatGemvKernel(DeviceWeight w, const float* x, int64_t n_tokens, float* y, MmvqRows g) {
  const MmvqTile tile = MmvqTileOf<kGemvTokens, 1>(n_tokens, w.data, g);
  const int64_t r = tile.r0;
  const int lane = tile.lane;
  if (r >= w.rows || tile.n_t <= 0) return;  // whole warps leave together
  const int64_t t0 = tile.t0;
  const int n_t = tile.n_t;
  const uint8_t* row = tile.data + r * w.row_bytes;
  const float* xs[kGemvTokens];
#pragma unroll
  for (int tt = 0; tt < kGemvTokens; ++tt) {
    xs[tt] = tt < n_t ? x + MmvqInputRow(g, t0 + tt) * w.cols : x;
  }
  float sum[kGemvTokens];
#pragma unroll
  for (int tt = 0; tt < kGemvTokens; ++tt) sum[tt] = 0.0f;
  for (int64_t c = lane; c < w.cols; c += kWarp) {
    const float wv = DequantElement(w.type, row, c);
#pragma unroll
    for (int tt = 0; tt < kGemvTokens; ++tt) {
      if (tt >= n_t) break;
      sum[tt] += wv * xs[tt][c];
    }
  }
#pragma unroll
  for (int tt = 0; tt < kGemvTokens; ++tt) {
    if (tt >= n_t) break;
    const float total = WarpSum(sum[tt]);
    if (lane == 0) y[(t0 + tt) * w.rows + r] = total;
  }
}

__global__ void DequantizeToBf16Kernel(DeviceWeight w, uint16_t* out) {
  const int64_t total = w.rows * w.cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t* row = w.data + e / w.cols * w.row_bytes;
    out[e] = FloatToBf16Bits(DeviceElement(w.type, row, w.cols, e % w.cols));
  }
}

}  // namespace

int64_t Q8_1Bytes(int64_t n_tokens, int64_t cols) { return n_tokens * Q8_1TokenBytes(cols); }

cudaError_t QuantizeQ8_1(const float* x, int64_t n_tokens, int64_t cols, uint8_t* out,
                         cudaStream_t stream) {
  if (cols % kQuantBlock != 0) return cudaErrorInvalidValue;
  const int64_t blocks = n_tokens * (cols / kQuantBlock);
  if (blocks == 0) return cudaSuccess;
  QuantizeQ8_1Kernel<<<internal::GridStrideBlocks(blocks, 128), 128, 0, stream>>>(x, n_tokens,
                                                                                 cols, out);
  return internal::LaunchStatus();
}

namespace {

// GemvQ8_1 and Gemv over the activation rows and experts of `g` (mmvq_launch.cuh); grid_z: the
// experts of a grouped launch, else 1.
cudaError_t GemvQ8_1Rows(const DeviceWeight& w, const uint8_t* x_q8, int64_t n_tokens, float* y,
                         const MmvqRows& g, int64_t grid_z, cudaStream_t stream) {
  if (IsKQuant(w.type)) {
    return internal::GemvKQuantQ8_1(w, x_q8, n_tokens, y, g, grid_z, stream);
  }
  if (!IsQuantized(w.type) || w.cols % kQuantBlock != 0) return cudaErrorInvalidValue;
  if (n_tokens == 0 || w.rows == 0) return cudaSuccess;
  if (w.type == kWQ4_0) return LaunchMmvq<kWQ4_0>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWQ4_1) return LaunchMmvq<kWQ4_1>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWQ5_0) return LaunchMmvq<kWQ5_0>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWQ5_1) return LaunchMmvq<kWQ5_1>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWIQ4_NL) return LaunchMmvq<kWIQ4_NL>(w, x_q8, n_tokens, y, g, grid_z, stream);
  return LaunchMmvq<kWQ8_0>(w, x_q8, n_tokens, y, g, grid_z, stream);
}

cudaError_t GemvRows(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                     const MmvqRows& g, int64_t grid_z, cudaStream_t stream) {
  if (TakesQ8_1(w.type)) return cudaErrorInvalidValue;  // GemvQ8_1
  if (n_tokens == 0 || w.rows == 0) return cudaSuccess;
  const GemvGrid geometry = GemvGeometry(w.rows, n_tokens);
  if (geometry.blocks_y > 65535 || grid_z < 1 || grid_z > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(geometry.blocks_x),
                  static_cast<unsigned>(geometry.blocks_y), static_cast<unsigned>(grid_z));
  FloatGemvKernel<<<grid, kGemvWarps * kWarp, 0, stream>>>(w, x, n_tokens, y, g);
  return internal::LaunchStatus();
}

}  // namespace

cudaError_t GemvQ8_1(const DeviceWeight& w, const uint8_t* x_q8, int64_t n_tokens, float* y,
                     cudaStream_t stream) {
  return GemvQ8_1Rows(w, x_q8, n_tokens, y, MmvqRows{}, 1, stream);
}

cudaError_t Gemv(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                 cudaStream_t stream) {
  return GemvRows(w, x, n_tokens, y, MmvqRows{}, 1, stream);
}

namespace {

// MmvqRows of a grouped launch, after checking that the experts and the groups agree.
bool GroupedRows(const DeviceWeight& w, bool per_token, const DeviceExpertGroups& g,
                 MmvqRows* rows) {
  if (w.n_experts != g.n_expert || g.n_expert < 1 || g.n_used < 1 || g.begin == nullptr ||
      (per_token && g.order == nullptr)) {
    return false;
  }
  rows->begin = g.begin;
  rows->order = per_token ? g.order : nullptr;
  rows->n_used = g.n_used;
  rows->expert_bytes = w.expert_bytes;
  return true;
}

}  // namespace

cudaError_t GroupedGemvQ8_1(const DeviceWeight& w, const uint8_t* x_q8, bool per_token,
                            const DeviceExpertGroups& g, float* y, cudaStream_t stream) {
  MmvqRows rows;
  if (!GroupedRows(w, per_token, g, &rows)) return cudaErrorInvalidValue;
  return GemvQ8_1Rows(w, x_q8, g.n_tokens, y, rows, g.n_expert, stream);
}

cudaError_t GroupedGemv(const DeviceWeight& w, const float* x, bool per_token,
                        const DeviceExpertGroups& g, float* y, cudaStream_t stream) {
  MmvqRows rows;
  if (!GroupedRows(w, per_token, g, &rows)) return cudaErrorInvalidValue;
  return GemvRows(w, x, g.n_tokens, y, rows, g.n_expert, stream);
}

cudaError_t DequantizeToBf16(const DeviceWeight& w, uint16_t* out, cudaStream_t stream) {
  const int64_t total = w.rows * w.cols;
  if (total == 0) return cudaSuccess;
  DequantizeToBf16Kernel<<<internal::GridStrideBlocks(total, 256), 256, 0, stream>>>(w, out);
  return internal::LaunchStatus();
}

}  // namespace tokenmill::cuda
