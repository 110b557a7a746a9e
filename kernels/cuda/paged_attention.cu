// Paged attention over the block tables, flash-decoding style: each (token, KV head, split)
// block attends the split's positions for all the query heads of that KV head (GQA heads
// share each K/V tile loaded into shared memory), then a merge kernel combines the splits'
// online-softmax partials in order. The split partition depends only on a token's own length
// (kernel_math.h), so prefill chunks, decode steps and batch neighbours never change a
// token's result.
#include <cuda_fp16.h>

#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::KvElement;
using internal::kWarp;
using internal::WarpSum;

constexpr int kTile = 16;  // positions per shared-memory K/V tile
constexpr int kThreads = kAttentionWarps * kWarp;
constexpr int kHeadsPerWarp = kMaxGroup / kAttentionWarps;
constexpr int kDimsPerLane = kMaxHeadDim / kWarp;

// Floats per (token, head, split) partial: the unnormalized output, then m and l.
__host__ __device__ constexpr int64_t PartialFloats(int head_dim) { return head_dim + 2; }

template <typename T>
__global__ void __launch_bounds__(kThreads)
    SplitKernel(DeviceKvLayer kv, DeviceBatch b, const float* q, int n_heads, float scale,
                int max_splits, float* workspace) {
  const int64_t t = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int split = blockIdx.z;
  const int32_t len = b.positions[t] + 1;
  if (split >= NumSplits(len)) return;
  const int d_head = kv.head_dim;
  const int group = n_heads / kv.n_kv_heads;
  const int32_t* blocks = b.kv_indices + b.kv_indptr[b.seq_of_token[t]];

  __shared__ float q_s[kMaxGroup * kMaxHeadDim];
  __shared__ alignas(16) unsigned char k_raw[kTile * kMaxHeadDim * sizeof(T)];
  __shared__ alignas(16) unsigned char v_raw[kTile * kMaxHeadDim * sizeof(T)];
  T* k_s = reinterpret_cast<T*>(k_raw);
  T* v_s = reinterpret_cast<T*>(v_raw);

  const float* q_t = q + (t * n_heads + static_cast<int64_t>(kv_head) * group) * d_head;
  for (int e = threadIdx.x; e < group * d_head; e += kThreads) {
    q_s[e] = KvElement<T>::RoundQuery(q_t[e]);
  }
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  SoftmaxPartial state[kHeadsPerWarp];
  float acc[kHeadsPerWarp][kDimsPerLane];
#pragma unroll
  for (int hi = 0; hi < kHeadsPerWarp; ++hi) {
    state[hi] = EmptyPartial();
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[hi][i] = 0.0f;
  }

  const T* k_cache = static_cast<const T*>(kv.k);
  const T* v_cache = static_cast<const T*>(kv.v);
  const int32_t end = SplitEnd(split, len);
  for (int32_t tile = SplitBegin(split, len); tile < end; tile += kTile) {
    const int n_pos = end - tile < kTile ? end - tile : kTile;
    __syncthreads();  // the previous tile is consumed (and q_s written, the first time)
    for (int e = threadIdx.x; e < n_pos * d_head; e += kThreads) {
      const int32_t pos = tile + e / d_head;
      const int64_t slot = static_cast<int64_t>(blocks[pos / kv.block_size]) * kv.block_size +
                           pos % kv.block_size;
      const int64_t offset = (slot * kv.n_kv_heads + kv_head) * d_head + e % d_head;
      k_s[e] = k_cache[offset];
      v_s[e] = v_cache[offset];
    }
    __syncthreads();
#pragma unroll
    for (int hi = 0; hi < kHeadsPerWarp; ++hi) {
      const int g = warp + hi * kAttentionWarps;
      if (g >= group) break;  // the same for the whole warp
      const float* q_g = q_s + g * d_head;
      for (int p = 0; p < n_pos; ++p) {
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + i * kWarp;
          if (d < d_head) partial += q_g[d] * KvElement<T>::Load(k_s[p * d_head + d]);
        }
        const float score = WarpSum(partial) * scale;
        float weight;
        const float factor = AddScore(&state[hi], score, &weight);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + i * kWarp;
          if (d < d_head) {
            acc[hi][i] = acc[hi][i] * factor + weight * KvElement<T>::Load(v_s[p * d_head + d]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int hi = 0; hi < kHeadsPerWarp; ++hi) {
    const int g = warp + hi * kAttentionWarps;
    if (g >= group) break;
    const int64_t head = static_cast<int64_t>(kv_head) * group + g;
    float* dst = workspace + ((t * n_heads + head) * max_splits + split) * PartialFloats(d_head);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      if (d < d_head) dst[d] = acc[hi][i];
    }
    if (lane == 0) {
      dst[d_head] = state[hi].m;
      dst[d_head + 1] = state[hi].l;
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
      acc = acc * merge.scale_a + src[d] * merge.scale_b;
      state = merge.merged;
    }
    out[(t * n_heads + head) * d_head + d] = acc / state.l;
  }
}

template <typename T>
cudaError_t Launch(const DeviceKvLayer& kv, const DeviceBatch& b, const float* q, int n_heads,
                   float scale, float* workspace, float* out, cudaStream_t stream) {
  const int max_splits = b.max_splits;
  const dim3 grid(static_cast<unsigned>(b.n_tokens), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(max_splits));
  SplitKernel<T><<<grid, kThreads, 0, stream>>>(kv, b, q, n_heads, scale, max_splits, workspace);
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

cudaError_t PagedAttention(const DeviceKvLayer& kv, const DeviceBatch& batch, const float* q,
                           int n_heads, float scale, float* workspace, float* out,
                           cudaStream_t stream) {
  if (batch.n_tokens == 0) return cudaSuccess;
  if (kv.head_dim > kMaxHeadDim || kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0 ||
      n_heads / kv.n_kv_heads > kMaxGroup || batch.max_splits < 1 ||
      batch.max_splits > kMaxSplits) {
    return cudaErrorInvalidValue;
  }
  switch (kv.type) {
    case DeviceKvType::kF16:
      return Launch<__half>(kv, batch, q, n_heads, scale, workspace, out, stream);
    case DeviceKvType::kF32:
      return Launch<float>(kv, batch, q, n_heads, scale, workspace, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tokenmill::cuda
