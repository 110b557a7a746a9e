// Paged attention over the block tables, flash-decoding style: each (query tile, KV head,
// split) block attends the split's positions for the tile's tokens and all the query heads of
// that KV head (GQA heads and a prefill chunk's tokens share each K/V tile loaded into shared
// memory), then a merge kernel combines the splits' online-softmax partials in order. The
// split partition depends only on a token's own length (kernel_math.h), so prefill chunks,
// decode steps and batch neighbours never change a token's result. int8/fp8 tiles stay
// codes in shared memory, beside their rows' scales; each use is dequantized in registers.
// A sliding window (DeviceAttentionVariant) only moves where each pair starts: splits stay
// those of the token's length, and a split wholly before the window leaves an empty partial.
#include <cuda_fp16.h>

#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::E4M3Code;
using internal::KvElement;
using internal::kWarp;
using internal::WarpSum;

constexpr int kTile = 16;  // positions per shared-memory K/V tile
constexpr int kThreads = kAttentionWarps * kWarp;
constexpr int kPairsPerWarp = kMaxTilePairs / kAttentionWarps;
constexpr int kDimsPerLane = kMaxHeadDim / kWarp;

// Floats per (token, head, split) partial: the unnormalized output, then m and l.
__host__ __device__ constexpr int64_t PartialFloats(int head_dim) { return head_dim + 2; }

// One block per (query tile, KV head, split): the tile's tokens x the group's query heads are
// (token, head) pairs, up to kPairsPerWarp per warp. Every pair walks the positions of its own
// split range in order with the same operations (explicitly rounded, no contraction left to
// the compiler), so a token's result does not depend on the tile it lands in.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SplitKernel(KvCacheView kv, DeviceBatch b, DeviceBlockTable table, const float* q,
                int n_heads, float scale, int max_splits, DeviceAttentionVariant variant,
                float* workspace) {
  const int32_t first = b.tiles[2 * blockIdx.x];
  const int count = b.tiles[2 * blockIdx.x + 1];
  const int kv_head = blockIdx.y;
  const int split = blockIdx.z;
  // Tokens of a tile share the split size; the last one is the longest. Positions before
  // the earliest window start of the tile's tokens are read by none of them.
  int32_t max_len = 0;
  int32_t min_visible = INT32_MAX;
  for (int i = 0; i < count; ++i) {
    const int32_t pos = b.positions[first + i];
    max_len = max(max_len, pos + 1);
    min_visible = min(min_visible, FirstVisible(variant.sliding_window, pos));
  }
  if (split >= NumSplits(max_len)) return;
  const int d_head = kv.head_dim;
  const int group = n_heads / kv.n_kv_heads;
  const int32_t* blocks = table.kv_indices + table.kv_indptr[b.seq_of_token[first]];

  __shared__ alignas(16) unsigned char k_raw[kTile * kMaxHeadDim * sizeof(T)];
  __shared__ alignas(16) unsigned char v_raw[kTile * kMaxHeadDim * sizeof(T)];
  __shared__ float k_scale_s[kTile];  // int8/fp8: the scale of each position's K row
  __shared__ float v_scale_s[kTile];
  T* k_s = reinterpret_cast<T*>(k_raw);
  T* v_s = reinterpret_cast<T*>(v_raw);

  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int n_pairs = count * group < kMaxTilePairs ? count * group : kMaxTilePairs;
  SoftmaxPartial state[kPairsPerWarp];
  float acc[kPairsPerWarp][kDimsPerLane];
  float q_reg[kPairsPerWarp][kDimsPerLane];
  int32_t pair_end[kPairsPerWarp];  // end of this pair's range in the split (<= begin: none)
  int32_t pair_begin[kPairsPerWarp];  // its first visible position (sliding window)
#pragma unroll
  for (int pi = 0; pi < kPairsPerWarp; ++pi) {
    state[pi] = EmptyPartial();
    const int pair = warp + pi * kAttentionWarps;
    const int token = pair / group;
    const int32_t len = pair < n_pairs ? b.positions[first + token] + 1 : 0;
    pair_end[pi] = pair < n_pairs ? SplitEnd(split, len) : 0;
    pair_begin[pi] = pair < n_pairs ? FirstVisible(variant.sliding_window, len - 1) : 0;
    const float* q_pair =
        q + ((static_cast<int64_t>(first) + token) * n_heads +
             static_cast<int64_t>(kv_head) * group + pair % group) * d_head;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      acc[pi][i] = 0.0f;
      q_reg[pi][i] = pair < n_pairs && d < d_head
                         ? KvElement<T>::RoundQuery(__fmul_rn(q_pair[d], variant.query_scale))
                         : 0.0f;
    }
  }

  const T* k_cache = static_cast<const T*>(kv.k);
  const T* v_cache = static_cast<const T*>(kv.v);
  const int32_t end = SplitEnd(split, max_len);
  const float inv_softcap = variant.softcap > 0.0f ? 1.0f / variant.softcap : 0.0f;
  const int32_t split_begin = SplitBegin(split, max_len);
  for (int32_t tile = split_begin > min_visible ? split_begin : min_visible; tile < end;
       tile += kTile) {
    const int n_pos = end - tile < kTile ? end - tile : kTile;
    __syncthreads();  // the previous tile is consumed
    for (int e = threadIdx.x; e < n_pos * d_head; e += kThreads) {
      const int32_t pos = tile + e / d_head;
      const int64_t slot = static_cast<int64_t>(blocks[pos / kv.block_size]) * kv.block_size +
                           pos % kv.block_size;
      const int64_t offset = (slot * kv.n_kv_heads + kv_head) * d_head + e % d_head;
      k_s[e] = k_cache[offset];
      v_s[e] = v_cache[offset];
    }
    if constexpr (KvElement<T>::kScaled) {
      for (int p = threadIdx.x; p < n_pos; p += kThreads) {
        const int32_t pos = tile + p;
        const int64_t slot = static_cast<int64_t>(blocks[pos / kv.block_size]) * kv.block_size +
                             pos % kv.block_size;
        k_scale_s[p] = kv.k_scale[slot * kv.n_kv_heads + kv_head];
        v_scale_s[p] = kv.v_scale[slot * kv.n_kv_heads + kv_head];
      }
    }
    __syncthreads();
#pragma unroll
    for (int pi = 0; pi < kPairsPerWarp; ++pi) {
      // Causal: this pair's positions stop at its own token (the same for the whole warp).
      const int n_mine = pair_end[pi] - tile < n_pos ? pair_end[pi] - tile : n_pos;
      const int p_first = pair_begin[pi] > tile ? pair_begin[pi] - tile : 0;
      for (int p = p_first; p < n_mine; ++p) {
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + i * kWarp;
          if (d < d_head) {
            partial = __fmaf_rn(q_reg[pi][i], KvElement<T>::Load(k_s[p * d_head + d]), partial);
          }
        }
        float dot = WarpSum(partial);
        if constexpr (KvElement<T>::kScaled) dot = __fmul_rn(dot, k_scale_s[p]);
        if (variant.softcap > 0.0f) {
          dot = __fmul_rn(tanhf(__fmul_rn(dot, inv_softcap)), variant.softcap);
        }
        const float score = __fmul_rn(dot, scale);
        float weight;
        const float factor = AddScore(&state[pi], score, &weight);
        // A quantized V row's scale goes into its weight: weight · (code · scale).
        float v_weight = weight;
        if constexpr (KvElement<T>::kScaled) v_weight = __fmul_rn(weight, v_scale_s[p]);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + i * kWarp;
          if (d < d_head) {
            acc[pi][i] = __fmaf_rn(v_weight, KvElement<T>::Load(v_s[p * d_head + d]),
                                   __fmul_rn(acc[pi][i], factor));
          }
        }
      }
    }
  }

#pragma unroll
  for (int pi = 0; pi < kPairsPerWarp; ++pi) {
    const int pair = warp + pi * kAttentionWarps;
    if (pair >= n_pairs || pair_end[pi] <= SplitBegin(split, max_len)) continue;
    const int64_t t = static_cast<int64_t>(first) + pair / group;
    const int64_t head = static_cast<int64_t>(kv_head) * group + pair % group;
    float* dst = workspace + ((t * n_heads + head) * max_splits + split) * PartialFloats(d_head);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      if (d < d_head) dst[d] = acc[pi][i];
    }
    if (lane == 0) {
      dst[d_head] = state[pi].m;
      dst[d_head + 1] = state[pi].l;
    }
  }
}

// One block per (token, head); threads over head dimensions; splits merged in order.
__global__ void MergeKernel(DeviceBatch b, int n_heads, int d_head, int max_splits,
                            const float* workspace, float* out) {
  const int64_t t = blockIdx.x;
  const int64_t head = blockIdx.y;
  const int n_splits = NumSplits(b.positions[t] + 1);
  const float* partials = workspace + (t * n_heads + head) * max_splits * PartialFloats(d_head);
  for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
    SoftmaxPartial state = EmptyPartial();
    float acc = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      const float* src = partials + s * PartialFloats(d_head);
      const SoftmaxMerge merge = MergePartials(state, SoftmaxPartial{src[d_head], src[d_head + 1]});
      acc = MulAdd(acc, merge.scale_a, src[d] * merge.scale_b);
      state = merge.merged;
    }
    out[(t * n_heads + head) * d_head + d] = acc / state.l;
  }
}

template <typename T>
cudaError_t Launch(const KvCacheView& kv, const DeviceBatch& b, const DeviceBlockTable& table,
                   const float* q, int n_heads, float scale, const DeviceAttentionVariant& variant,
                   float* workspace, float* out, cudaStream_t stream) {
  const int max_splits = b.max_splits;
  const dim3 grid(static_cast<unsigned>(b.n_tiles), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(max_splits));
  SplitKernel<T><<<grid, kThreads, 0, stream>>>(kv, b, table, q, n_heads, scale, max_splits,
                                                 variant, workspace);
  const cudaError_t err = internal::LaunchStatus();
  if (err != cudaSuccess) return err;
  const dim3 merge_grid(static_cast<unsigned>(b.n_tokens), static_cast<unsigned>(n_heads));
  MergeKernel<<<merge_grid, kv.head_dim <= 128 ? 128 : 256, 0, stream>>>(
      b, n_heads, kv.head_dim, max_splits, workspace, out);
  return internal::LaunchStatus();
}

}  // namespace

int64_t AttentionWorkspaceFloats(int64_t n_tokens, int n_heads, int head_dim, int max_splits) {
  return n_tokens * n_heads * max_splits * PartialFloats(head_dim);
}

int MaxSplits(const int32_t* positions, int64_t n_tokens) {
  int max_splits = 1;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int splits = NumSplits(positions[t] + 1);
    if (splits > max_splits) max_splits = splits;
  }
  return max_splits;
}

cudaError_t PagedAttention(const KvCacheView& kv, const DeviceBatch& batch,
                           const DeviceBlockTable& table, const float* q, int n_heads,
                           float scale, float* workspace, float* out, cudaStream_t stream,
                           const DeviceAttentionVariant& variant) {
  if (batch.n_tokens == 0) return cudaSuccess;
  if (variant.sliding_window < 0 || !(variant.softcap >= 0.0f)) return cudaErrorInvalidValue;
  if (batch.tiles == nullptr || batch.n_tiles < 1) return cudaErrorInvalidValue;
  if (kv.head_dim > kMaxHeadDim || kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0 ||
      n_heads / kv.n_kv_heads > kMaxGroup || batch.max_splits < 1 ||
      batch.max_splits > kMaxSplits) {
    return cudaErrorInvalidValue;
  }
  switch (kv.type) {
    case KvType::kF16:
      return Launch<__half>(kv, batch, table, q, n_heads, scale, variant, workspace, out, stream);
    case KvType::kF32:
      return Launch<float>(kv, batch, table, q, n_heads, scale, variant, workspace, out, stream);
    case KvType::kInt8:
      if (kv.k_scale == nullptr || kv.v_scale == nullptr) return cudaErrorInvalidValue;
      return Launch<int8_t>(kv, batch, table, q, n_heads, scale, variant, workspace, out, stream);
    case KvType::kFp8:
      if (kv.k_scale == nullptr || kv.v_scale == nullptr) return cudaErrorInvalidValue;
      return Launch<E4M3Code>(kv, batch, table, q, n_heads, scale, variant, workspace, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tokenmill::cuda
