// Decode GEMV over Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS weights (packed:
// mmvq_kquant_math.h), gemv.cu's MMVQ design one sub-block a word: each lane reads a sub-block's
// 16-byte word of low nibbles and its high bits and multiplies the 32 quants with the q8_1
// activations of that 32-block by __dp4a (KWordDot; Q2_K's per-16 minimums KWordMinDot); a
// warp computes rows_per_warp rows for up to 8 tokens (PlanMmvq).
// KMmvqDot is the host emulation, bit for bit. GemvQ8_1 (gemv.cu) calls it.
#include "kernels/cuda/gemv_kquant.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mmvq_launch.cuh"
#include "kernels/cuda/mmvq_kquant_math.h"
#include "kernels/cuda/mmvq_math.h"

namespace tokenmill::cuda::internal {
namespace {

template <uint32_t kType>
__device__ uint2 LoadHigh(const uint8_t* row, int64_t high_at, int64_t s) {
  if constexpr (kType == kWQ5_K) {
    return make_uint2(reinterpret_cast<const unsigned*>(row + high_at)[s], 0u);
  } else if constexpr (kType == kWQ6_K) {
    return reinterpret_cast<const uint2*>(row + high_at)[s];
  } else {
    return make_uint2(0u, 0u);
  }
}

template <uint32_t kType, int kTokens, int kRows>
__global__ void __launch_bounds__(kMmvqWarps * kWarp)
    KMmvqKernel(DeviceWeight w, const uint8_t* x_q8, int64_t n_tokens, float* y, MmvqRows g) {
  const MmvqTile tile = MmvqTileOf<kTokens, kRows>(n_tokens, w.data, g);
  if (tile.r0 >= w.rows || tile.n_t <= 0) return;  // whole warps leave together
  const int lane = tile.lane;
  const int64_t r0 = tile.r0, t0 = tile.t0;
  const int n_t = tile.n_t;
  const int64_t subs = w.cols / kKSub;
  const int64_t high_at = KLayoutOf(kType, w.cols).high;
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
  for (int64_t s = lane; s < subs; s += kWarp) {
    int4 a[kTokens][2];
    float ds[kTokens][2];
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      if (tt >= n_t) break;
      const uint8_t* token = xs[tt];
      const int4* words_a = reinterpret_cast<const int4*>(token + s * kKSub);
      a[tt][0] = words_a[0];
      a[tt][1] = words_a[1];
      const float2 f = reinterpret_cast<const float2*>(token + w.cols)[s];
      ds[tt][0] = f.x;
      ds[tt][1] = f.y;
    }
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      if (r0 + rr >= w.rows) break;
      const uint8_t* row = tile.data + (r0 + rr) * w.row_bytes;
      const int4 q4 = reinterpret_cast<const int4*>(row)[s];
      const uint32_t q[4] = {static_cast<uint32_t>(q4.x), static_cast<uint32_t>(q4.y),
                             static_cast<uint32_t>(q4.z), static_cast<uint32_t>(q4.w)};
      const uint2 h = LoadHigh<kType>(row, high_at, s);
      const uint32_t high[2] = {h.x, h.y};
      float d_w, m_w;
      int sub[4];
      KWordScales(kType, row, w.cols, s, &d_w, &m_w, sub);
#pragma unroll
      for (int tt = 0; tt < kTokens; ++tt) {
        if (tt >= n_t) break;
        const int32_t act[8] = {a[tt][0].x, a[tt][0].y, a[tt][0].z, a[tt][0].w,
                                a[tt][1].x, a[tt][1].y, a[tt][1].z, a[tt][1].w};
        acc[rr][tt] = KMmvqStep(kType, acc[rr][tt], KWordDot(kType, q, high, act, sub),
                                KWordMinDot(kType, act, sub), d_w, m_w, ds[tt]);
      }
    }
  }
  StoreWarpSums(acc, tile, w.rows, y);
}

template <uint32_t kType>
cudaError_t LaunchKMmvq(const DeviceWeight& w, const uint8_t* x_q8, int64_t n_tokens, float* y,
                        const MmvqRows& g, int64_t grid_z, cudaStream_t stream) {
  return LaunchMmvqPlan(
      w.rows, n_tokens,
      [&](dim3 grid, int threads, auto tokens, auto rows) {
        KMmvqKernel<kType, decltype(tokens)::value, decltype(rows)::value>
            <<<grid, threads, 0, stream>>>(w, x_q8, n_tokens, y, g);
      },
      grid_z);
}

}  // namespace

cudaError_t GemvKQuantQ8_1(const DeviceWeight& w, const uint8_t* x_q8, int64_t n_tokens, float* y,
                           const MmvqRows& g, int64_t grid_z, cudaStream_t stream) {
  if (!IsKQuant(w.type) || w.cols % kKBlock != 0) return cudaErrorInvalidValue;
  if (n_tokens == 0 || w.rows == 0) return cudaSuccess;
  if (w.type == kWQ2_K) return LaunchKMmvq<kWQ2_K>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWQ3_K) return LaunchKMmvq<kWQ3_K>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWQ4_K) return LaunchKMmvq<kWQ4_K>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWQ5_K) return LaunchKMmvq<kWQ5_K>(w, x_q8, n_tokens, y, g, grid_z, stream);
  if (w.type == kWQ6_K) return LaunchKMmvq<kWQ6_K>(w, x_q8, n_tokens, y, g, grid_z, stream);
  return LaunchKMmvq<kWIQ4_XS>(w, x_q8, n_tokens, y, g, grid_z, stream);
}

}  // namespace tokenmill::cuda::internal
