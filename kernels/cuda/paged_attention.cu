// Paged attention over the block tables, flash-decoding style: each (query tile, KV head,
// split) block attends the split's positions for the tile's tokens and all the query heads of
// that KV head (GQA heads and a prefill chunk's tokens share each K/V tile loaded into shared
// memory), then a merge kernel combines the splits' online-softmax partials in order. The
// split partition depends only on a token's own length (kernel_math.h), so prefill chunks,
// decode steps and batch neighbours never change a token's result. int8/fp8 tiles stay
// codes in shared memory, beside their rows' scales; each use is dequantized in registers.
// q4_0 and int4 tiles too (two codes a byte, a block's f16 scales), their keys read by a query
// rotated as they were (KvRotationOf) and the output rotated back in the merge, as the CPU.
// K/V rows come in 16-byte cp.async pieces where their size and the pool's alignment allow
// (else element by element), double-buffered: tile i + 1 is in flight while tile i is used.
// A sliding window (DeviceAttentionVariant) only moves where each pair starts: splits stay
// those of the token's length, and a split wholly before the window leaves an empty partial.
// Multi-head latent attention (KvCacheView::v_in_k) is the same kernel, wider (kLatent: rows
// up to kMaxLatentHeadDim, 8 warps of 2 pairs): all the query heads of a token over its one
// latent row, the V weights applied to the K tile's first value_dim elements in shared memory,
// no V tile loaded; groups past kMaxTilePairs heads in several blocks along y.
#include <cuda_fp16.h>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/kv_types.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

using internal::CommitCopies;
using internal::CopyAsync16;
using internal::CopyAsync4;
using internal::E4M3Code;
using internal::Int4Codes;
using internal::KvElement;
using internal::Q4_0Codes;
using internal::kWarp;
using internal::WaitCopies;
using internal::WarpSum;

// The kernel's shape: the GQA instance, or the latent one (kernel_math.h).
template <bool kLatent>
struct Shape {
  static constexpr int kWarps = kLatent ? kLatentWarps : kAttentionWarps;
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kPairsPerWarp = kMaxTilePairs / kWarps;
  static constexpr int kDimsPerLane = (kLatent ? kMaxLatentHeadDim : kMaxHeadDim) / kWarp;
};
static_assert(kMaxTilePairs % kLatentWarps == 0 && kMaxLatentHeadDim % kWarp == 0);

// Floats per (token, head, split) partial: the unnormalized output, then m and l.
__host__ __device__ constexpr int64_t PartialFloats(int head_dim) { return head_dim + 2; }

// One stage of the dynamic shared memory (PlanAttentionTileRows' layout).
template <typename T>
struct TileStage {
  T* k;  // positions x row_bytes, row after row
  T* v;
  // int8/fp8: each position's row scale. 4-bit: each position's plan.scale_bytes of f16s
  // (ScaleBytes). Typed float for all (as bytes the int8 kernels took more registers).
  float* k_scale;
  float* v_scale;
};

// kVInK: the stage holds K alone, and V is K.
template <typename T, bool kVInK>
__device__ TileStage<T> StageAt(unsigned char* shared, const AttentionTilePlan& plan,
                                int stage) {
  unsigned char* base = shared + stage * plan.stage_bytes;
  if constexpr (kVInK) {
    float* k_scales = reinterpret_cast<float*>(base + plan.kv_bytes);
    return TileStage<T>{reinterpret_cast<T*>(base), reinterpret_cast<T*>(base), k_scales,
                        k_scales};
  }
  float* k_scales = reinterpret_cast<float*>(base + 2 * plan.kv_bytes);
  float* v_scales = KvElement<T>::kFourBit
                        ? reinterpret_cast<float*>(base + 2 * plan.kv_bytes +
                                                   plan.positions * plan.scale_bytes)
                        : k_scales + plan.positions;
  return TileStage<T>{reinterpret_cast<T*>(base), reinterpret_cast<T*>(base + plan.kv_bytes),
                      k_scales, v_scales};
}

__device__ inline unsigned char* ScaleBytes(float* scales) {
  return reinterpret_cast<unsigned char*>(scales);
}
__device__ inline const unsigned char* ScaleBytes(const float* scales) {
  return reinterpret_cast<const unsigned char*>(scales);
}

// Issues this thread's share of the copies of positions [tile, tile + n_pos) of KV head
// kv_head into a stage; the caller commits, waits and synchronizes. Vector rows: the stage's
// rows lie back to back as whole 16-byte pieces, so piece c of the tile (piece c % pieces of
// its row c / pieces) goes to byte c * 16. kVInK: K's rows and scales alone.
template <typename T, bool kVectorRows, int kThreads, bool kVInK>
__device__ void LoadTile(const KvCacheView& kv, const int32_t* blocks, int kv_head,
                         int32_t tile, int n_pos, const AttentionTilePlan& plan,
                         TileStage<T> dst) {
  // The (slot, KV head) row of the tile's position p.
  auto row_of = [&](int p) {
    const int32_t pos = tile + p;
    const int64_t slot = static_cast<int64_t>(blocks[pos / kv.block_size]) * kv.block_size +
                         pos % kv.block_size;
    return slot * kv.n_kv_heads + kv_head;
  };
  if constexpr (kVectorRows) {
    const int pieces = plan.row_bytes / kCopyBytes;
    const auto* k_src = static_cast<const unsigned char*>(kv.k);
    const auto* v_src = static_cast<const unsigned char*>(kv.v);
    auto* k_dst = reinterpret_cast<unsigned char*>(dst.k);
    auto* v_dst = reinterpret_cast<unsigned char*>(dst.v);
    for (int c = threadIdx.x; c < n_pos * pieces; c += kThreads) {
      const int64_t at = row_of(c / pieces) * plan.row_bytes + (c % pieces) * kCopyBytes;
      CopyAsync16(k_dst + c * kCopyBytes, k_src + at);
      if constexpr (!kVInK) CopyAsync16(v_dst + c * kCopyBytes, v_src + at);
    }
  } else {
    const int row_elems = KvElement<T>::kFourBit ? plan.row_bytes : kv.head_dim;
    const T* k_cache = static_cast<const T*>(kv.k);
    const T* v_cache = static_cast<const T*>(kv.v);
    for (int e = threadIdx.x; e < n_pos * row_elems; e += kThreads) {
      const int64_t offset = row_of(e / row_elems) * row_elems + e % row_elems;
      dst.k[e] = k_cache[offset];
      if constexpr (!kVInK) dst.v[e] = v_cache[offset];
    }
  }
  if constexpr (KvElement<T>::kScaled) {
    // At most one trip (n_pos <= kAttentionTile < kThreads): unrolled, it only took registers
    // (a spill on sm_90).
#pragma unroll 1
    for (int p = threadIdx.x; p < n_pos; p += kThreads) {
      const int64_t row = row_of(p);
      CopyAsync4(dst.k_scale + p, static_cast<const float*>(kv.k_scale) + row);
      if constexpr (!kVInK) {
        CopyAsync4(dst.v_scale + p, static_cast<const float*>(kv.v_scale) + row);
      }
    }
  }
  if constexpr (KvElement<T>::kFourBit && !kVInK) {
    // A row's f16 scales in 4-byte pieces (int4: d / 8 bytes; q4_0: d / 16), else one by one
    // (q4_0 rows of an odd number of blocks).
    const int bytes = plan.scale_bytes;
    const auto* k_src = static_cast<const unsigned char*>(kv.k_scale);
    const auto* v_src = static_cast<const unsigned char*>(kv.v_scale);
    unsigned char* k_dst = ScaleBytes(dst.k_scale);
    unsigned char* v_dst = ScaleBytes(dst.v_scale);
    if (bytes % 4 == 0) {
#pragma unroll 1
      for (int c = threadIdx.x; c < n_pos * (bytes / 4); c += kThreads) {
        const int64_t at = row_of(c / (bytes / 4)) * bytes + (c % (bytes / 4)) * 4;
        CopyAsync4(k_dst + c * 4, k_src + at);
        CopyAsync4(v_dst + c * 4, v_src + at);
      }
    } else {
#pragma unroll 1
      for (int c = threadIdx.x; c < n_pos * (bytes / 2); c += kThreads) {
        const int64_t at = row_of(c / (bytes / 2)) * bytes + (c % (bytes / 2)) * 2;
        *reinterpret_cast<uint16_t*>(k_dst + c * 2) =
            *reinterpret_cast<const uint16_t*>(k_src + at);
        *reinterpret_cast<uint16_t*>(v_dst + c * 2) =
            *reinterpret_cast<const uint16_t*>(v_src + at);
      }
    }
  }
}

// Element lane + 32 i of a 4-bit row of a tile (block i, element `lane` of it): its codes at
// `row` (16 bytes a block), its scales at `scales` (kScaleHalves f16s a block).
template <typename T>
__device__ float FourBitElement(const T* row, const unsigned char* scales, int i, int lane) {
  return KvElement<T>::Load4(reinterpret_cast<const uint8_t*>(row) + i * (kWarp / 2), lane,
                             reinterpret_cast<const uint16_t*>(scales) +
                                 i * KvElement<T>::kScaleHalves);
}

// Each head's output (d_head values at out, in shared memory) rotated in blocks of n as the
// CPU's HadamardRotate does it (HadamardButterfly); the block's threads together, stage after
// stage. Every thread of the block calls it.
__device__ void HadamardRotateBlock(float* out, int d_head, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int pair = threadIdx.x; pair < d_head / 2; pair += blockDim.x) {
      const int j = pair / h * 2 * h + pair % h;  // the lower of the pair (j, j + h)
      const float a = out[j], b = out[j + h];
      out[j] = HadamardButterfly(a, b, false);
      out[j + h] = HadamardButterfly(b, a, true);
    }
    __syncthreads();
  }
}

// One block per (query tile, KV head and chunk of its heads, split): the tile's tokens x the
// chunk's query heads are (token, head) pairs, up to kPairsPerWarp per warp. Every pair walks
// the positions of its own split range in order with the same operations (explicitly rounded,
// no contraction left to the compiler), so a token's result does not depend on the tile it
// lands in. d_v: V's width (the latent's with V within K, else head_dim).
template <typename T, bool kVectorRows, bool kLatent>
__global__ void __launch_bounds__(Shape<kLatent>::kThreads, 1)
    SplitKernel(KvCacheView kv, DeviceBatch b, DeviceBlockTable table, const float* q,
                int n_heads, float scale, int max_splits, DeviceAttentionVariant variant,
                AttentionTilePlan plan, int q_rotation, float q_norm, int d_v, float* workspace) {
  constexpr int kThreads = Shape<kLatent>::kThreads;
  constexpr int kWarps = Shape<kLatent>::kWarps;
  constexpr int kPairsPerWarp = Shape<kLatent>::kPairsPerWarp;
  constexpr int kDimsPerLane = Shape<kLatent>::kDimsPerLane;
  const int32_t first = b.tiles[2 * blockIdx.x];
  const int count = b.tiles[2 * blockIdx.x + 1];
  const int group = n_heads / kv.n_kv_heads;
  // GQA's groups (<= kMaxGroup) are one chunk: its arithmetic kept as it was (registers).
  const int block_group = kLatent ? BlockGroup(group) : group;
  const int kv_head =
      kLatent ? static_cast<int>(blockIdx.y) / HeadChunks(group) : static_cast<int>(blockIdx.y);
  // The query head of a pair: its place in this block's chunk of the KV head's group.
  const auto head_of = [&](int pair) -> int64_t {
    if constexpr (kLatent) return ChunkPairHead(group, static_cast<int>(blockIdx.y), pair);
    return static_cast<int64_t>(blockIdx.y) * group + pair % group;
  };
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
  if constexpr (!kLatent) d_v = d_head;  // the same predicates for K and V: fewer registers
  const int32_t* blocks = table.kv_indices + table.kv_indptr[b.seq_of_token[first]];

  extern __shared__ __align__(16) unsigned char shared[];  // plan.shared_bytes

  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int n_pairs = count * block_group < kMaxTilePairs ? count * block_group : kMaxTilePairs;
  SoftmaxPartial state[kPairsPerWarp];
  float acc[kPairsPerWarp][kDimsPerLane];
  float q_reg[kPairsPerWarp][kDimsPerLane];
  int32_t pair_end[kPairsPerWarp];  // end of this pair's range in the split (<= begin: none)
  int32_t pair_begin[kPairsPerWarp];  // its first visible position (sliding window)
#pragma unroll
  for (int pi = 0; pi < kPairsPerWarp; ++pi) {
    state[pi] = EmptyPartial();
    const int pair = warp + pi * kWarps;
    const int token = pair / block_group;
    const int32_t len = pair < n_pairs ? b.positions[first + token] + 1 : 0;
    pair_end[pi] = pair < n_pairs ? SplitEnd(split, len) : 0;
    pair_begin[pi] = pair < n_pairs ? FirstVisible(variant.sliding_window, len - 1) : 0;
    const float* q_pair =
        q + ((static_cast<int64_t>(first) + token) * n_heads + head_of(pair)) * d_head;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      acc[pi][i] = 0.0f;
      q_reg[pi][i] = pair < n_pairs && d < d_head
                         ? KvElement<T>::RoundQuery(__fmul_rn(q_pair[d], variant.query_scale))
                         : 0.0f;
    }
    // 4-bit keys were rotated before they were quantized: the query (scaled as the CPU's
    // graph scales it before its attention) rotates as they did. The same for every lane.
    if constexpr (KvElement<T>::kFourBit) {
      if (q_rotation > 0) internal::HadamardRotateWarp(q_reg[pi], q_rotation, q_norm, lane);
    }
  }

  const int32_t end = SplitEnd(split, max_len);
  const float inv_softcap = variant.softcap > 0.0f ? 1.0f / variant.softcap : 0.0f;
  const int32_t split_begin = SplitBegin(split, max_len);
  const int32_t first_tile = split_begin > min_visible ? split_begin : min_visible;
  const int tile_positions = plan.positions;
  // Double buffering. first_tile, end and so every trip of the loop are the block's, not a
  // thread's: every thread reaches every barrier. Tile j lives in stage j % 2; iteration j
  //   1. issues tile j + 1's copies into stage (j + 1) % 2 and commits them as one group;
  //   2. waits for this thread's group of tile j (all but the newest), then barrier A: after
  //      it every thread's copies of tile j are complete and visible to the whole block;
  //   3. computes on stage j % 2 (reads only);
  //   4. barrier B: no thread still reads stage j % 2 when iteration j + 1 refills it.
  // So a stage is written (by cp.async, or by the element path's plain stores) only after
  // barrier B of the iteration that last read it, and read only after barrier A following
  // the wait for the copies that filled it: no write to a stage overlaps a read of it. The
  // prologue fills stage 0 before any read. The last iteration commits an empty group and
  // waits for all but it, so no copy is in flight at exit.
  if (first_tile < end) {
    const int n_first = end - first_tile < tile_positions ? end - first_tile : tile_positions;
    LoadTile<T, kVectorRows, kThreads, kLatent>(kv, blocks, kv_head, first_tile, n_first, plan,
                                                StageAt<T, kLatent>(shared, plan, 0));
  }
  CommitCopies();
  int stage = 0;
  for (int32_t tile = first_tile; tile < end; tile += tile_positions, stage ^= 1) {
    const int n_pos = end - tile < tile_positions ? end - tile : tile_positions;
    const int32_t next = tile + tile_positions;
    if (next < end) {
      const int n_next = end - next < tile_positions ? end - next : tile_positions;
      LoadTile<T, kVectorRows, kThreads, kLatent>(kv, blocks, kv_head, next, n_next, plan,
                                                  StageAt<T, kLatent>(shared, plan, stage ^ 1));
    }
    CommitCopies();
    WaitCopies<1>();
    __syncthreads();  // A: tile `tile` is complete in stage `stage`
    const TileStage<T> cur = StageAt<T, kLatent>(shared, plan, stage);
    const T* k_s = cur.k;
    const T* v_s = cur.v;
    const float* k_scale_s = cur.k_scale;
    const float* v_scale_s = cur.v_scale;
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
            float k_value;
            if constexpr (KvElement<T>::kFourBit) {
              k_value = FourBitElement(k_s + p * plan.row_bytes,
                                       ScaleBytes(k_scale_s) + p * plan.scale_bytes, i, lane);
            } else {
              k_value = KvElement<T>::Load(k_s[p * d_head + d]);
            }
            partial = __fmaf_rn(q_reg[pi][i], k_value, partial);
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
          if (d < d_v) {
            float v_value;
            if constexpr (KvElement<T>::kFourBit) {
              v_value = FourBitElement(v_s + p * plan.row_bytes,
                                       ScaleBytes(v_scale_s) + p * plan.scale_bytes, i, lane);
            } else {
              v_value = KvElement<T>::Load(v_s[p * d_head + d]);
            }
            acc[pi][i] = __fmaf_rn(v_weight, v_value, __fmul_rn(acc[pi][i], factor));
          }
        }
      }
    }
    __syncthreads();  // B: every warp is done with stage `stage`
  }

#pragma unroll
  for (int pi = 0; pi < kPairsPerWarp; ++pi) {
    const int pair = warp + pi * kWarps;
    if (pair >= n_pairs || pair_end[pi] <= SplitBegin(split, max_len)) continue;
    const int64_t t = static_cast<int64_t>(first) + pair / block_group;
    const int64_t head = head_of(pair);
    float* dst = workspace + ((t * n_heads + head) * max_splits + split) * PartialFloats(d_v);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      if (d < d_v) dst[d] = acc[pi][i];
    }
    if (lane == 0) {
      dst[d_v] = state[pi].m;
      dst[d_v + 1] = state[pi].l;
    }
  }
}

// One block per (token, head); threads over head dimensions (d_head: V's width); splits
// merged in order. 4-bit V (out_rotation > 0, d_head <= kMaxHeadDim): the output rotated back
// in blocks of out_rotation (the CPU rotates its output after attending).
__global__ void MergeKernel(DeviceBatch b, int n_heads, int d_head, int max_splits,
                            const float* workspace, int out_rotation, float out_norm,
                            float* out) {
  __shared__ float rotated[kMaxHeadDim];
  const int64_t t = blockIdx.x;
  const int64_t head = blockIdx.y;
  const int n_splits = NumSplits(b.positions[t] + 1);
  const float* partials = workspace + (t * n_heads + head) * max_splits * PartialFloats(d_head);
  float* dst = out + (t * n_heads + head) * d_head;
  for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
    SoftmaxPartial state = EmptyPartial();
    float acc = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      const float* src = partials + s * PartialFloats(d_head);
      const SoftmaxMerge merge = MergePartials(state, SoftmaxPartial{src[d_head], src[d_head + 1]});
      acc = MulAdd(acc, merge.scale_a, src[d] * merge.scale_b);
      state = merge.merged;
    }
    if (out_rotation > 0) {
      rotated[d] = acc / state.l;
    } else {
      dst[d] = acc / state.l;
    }
  }
  if (out_rotation == 0) return;  // the whole block's
  __syncthreads();
  HadamardRotateBlock(rotated, d_head, out_rotation);
  for (int d = threadIdx.x; d < d_head; d += blockDim.x) dst[d] = MulRn(rotated[d], out_norm);
}

template <typename T, bool kLatent = false>
cudaError_t Launch(const KvCacheView& kv, const DeviceBatch& b, const DeviceBlockTable& table,
                   const float* q, int n_heads, float scale, const DeviceAttentionVariant& variant,
                   float* workspace, float* out, cudaStream_t stream) {
  static_assert(!(kLatent && KvElement<T>::kFourBit), "4-bit latent rows are refused");
  const int max_splits = b.max_splits;
  const int group = n_heads / kv.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(b.n_tiles),
                  static_cast<unsigned>(kv.n_kv_heads * HeadChunks(group)),
                  static_cast<unsigned>(max_splits));
  const bool aligned = reinterpret_cast<uintptr_t>(kv.k) % kCopyBytes == 0 &&
                       reinterpret_cast<uintptr_t>(kv.v) % kCopyBytes == 0;
  const AttentionTilePlan plan =
      KvElement<T>::kFourBit
          ? PlanAttentionTileRows(static_cast<int>(KvRowBytes(kv.type, kv.head_dim)),
                                  static_cast<int>(KvRowScaleBytes(kv.type, kv.head_dim)),
                                  aligned)
          : PlanAttentionTiles(kv.head_dim, static_cast<int>(sizeof(T)), aligned, kLatent);
  if (plan.shared_bytes > kDefaultSharedBytes) return cudaErrorInvalidValue;
  const int d_v = kLatent && variant.value_dim > 0 ? variant.value_dim : kv.head_dim;
  // The 4-bit types' rotations (KvRotationOf): the query as K, the output back as V.
  const int q_rotation = KvElement<T>::kFourBit ? KvKeyRotation(kv.head_dim) : 0;
  const int out_rotation = KvElement<T>::kFourBit ? KvValueRotation(kv.head_dim) : 0;
  const float q_norm = q_rotation > 0 ? HadamardNorm(q_rotation) : 0.0f;
  const float out_norm = out_rotation > 0 ? HadamardNorm(out_rotation) : 0.0f;
  // Each row path a kernel of its own: the other's code would only add registers.
  auto* kernel =
      plan.vector_rows ? SplitKernel<T, true, kLatent> : SplitKernel<T, false, kLatent>;
  kernel<<<grid, Shape<kLatent>::kThreads, static_cast<size_t>(plan.shared_bytes), stream>>>(
      kv, b, table, q, n_heads, scale, max_splits, variant, plan, q_rotation, q_norm, d_v,
      workspace);
  const cudaError_t err = internal::LaunchStatus();
  if (err != cudaSuccess) return err;
  const dim3 merge_grid(static_cast<unsigned>(b.n_tokens), static_cast<unsigned>(n_heads));
  MergeKernel<<<merge_grid, d_v <= 128 ? 128 : 256, 0, stream>>>(
      b, n_heads, d_v, max_splits, workspace, out_rotation, out_norm, out);
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
  if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0 ||
      !AttentionShapeFits(kv.head_dim, n_heads / kv.n_kv_heads, kv.v_in_k, variant.value_dim) ||
      batch.max_splits < 1 || batch.max_splits > kMaxSplits ||
      kv.v_type != kv.type) {  // K and V of one type
    return cudaErrorInvalidValue;
  }
  if (kv.v_in_k) {  // multi-head latent attention: the wide instance, V within K
    switch (kv.type) {
      case KvType::kF16:
        return Launch<__half, true>(kv, batch, table, q, n_heads, scale, variant, workspace, out,
                                    stream);
      case KvType::kF32:
        return Launch<float, true>(kv, batch, table, q, n_heads, scale, variant, workspace, out,
                                   stream);
      case KvType::kInt8:
        if (kv.k_scale == nullptr) return cudaErrorInvalidValue;
        return Launch<int8_t, true>(kv, batch, table, q, n_heads, scale, variant, workspace, out,
                                    stream);
      case KvType::kFp8:
        if (kv.k_scale == nullptr) return cudaErrorInvalidValue;
        return Launch<E4M3Code, true>(kv, batch, table, q, n_heads, scale, variant, workspace,
                                      out, stream);
      default:
        return cudaErrorInvalidValue;  // 4-bit latent rows: refused (KvTypeFitsLatentOnCuda)
    }
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
    case KvType::kQ4_0:
    case KvType::kInt4:
      if (kv.k_scale == nullptr || kv.v_scale == nullptr || kv.head_dim % kKvQ4Block != 0) {
        return cudaErrorInvalidValue;
      }
      if (kv.type == KvType::kQ4_0) {
        return Launch<Q4_0Codes>(kv, batch, table, q, n_heads, scale, variant, workspace, out,
                                 stream);
      }
      return Launch<Int4Codes>(kv, batch, table, q, n_heads, scale, variant, workspace, out,
                               stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tokenmill::cuda
