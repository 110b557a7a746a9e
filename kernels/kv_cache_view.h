// The KV cache's element types and the view of its blocks that every device's kernels and
// forward pass read (the step's block tables are in kernels/paged_kv.h). C++17 with nothing
// but <cstdint>: nvcc includes it through kernels/cuda/ops.h.
#pragma once

#include <cstdint>

namespace tokenmill {

// kInt8: symmetric int8 with one float scale per (token, KV head) for K and one for V
// (scale = max|x| / 127, x ≈ q · scale), the scales in their own arrays beside K and V.
// kFp8: FP8 E4M3 (OCP "e4m3fn": no infinities, max 448) in the same layout, with
// scale = max|x| / 448 (kernels/cuda/kernel_math.h); the CUDA backend only.
// kQ4_0: llama.cpp's Q4_0 over each row's blocks of 32 (head_dim a multiple of 32): 16 bytes
// of 4-bit codes a block in the row (element j in the low nibble of byte j, j + 16 in its high
// one; x ≈ (code - 8) · d), and the blocks' f16 scales d in the scale arrays, so a row's codes
// stay whole 16-byte pieces. 32 values in 18 bytes; the CPU and CUDA.
// kInt4: asymmetric 4-bit (LMDeploy's int4 KV): per group of kKvInt4Group values of a row, an
// f16 scale and an f16 zero point (x ≈ code · scale + zero, codes 0..15 spanning the group's
// min to max), the codes packed as q4_0's blocks of 32, each group's (scale, zero) pair in the
// scale arrays. The CPU and CUDA.
enum class KvType { kF16, kF32, kInt8, kFp8, kQ4_0, kInt4 };

// Values a Q4_0 scale covers; the packing unit of both 4-bit types' codes.
constexpr int64_t kKvQ4Block = 32;
// Values an int4 (scale, zero) pair covers: 32, by measurement (docs/benchmarks.md: 64 cost
// more KL than q4_0 in the same bytes).
constexpr int64_t kKvInt4Group = 32;

// Bits of one K (or V) element's code.
constexpr int KvElementBits(KvType type) {
  switch (type) {
    case KvType::kF16: return 16;
    case KvType::kF32: return 32;
    case KvType::kInt8: return 8;
    case KvType::kFp8: return 8;
    case KvType::kQ4_0: return 4;
    case KvType::kInt4: return 4;
  }
  return 0;
}

// Bytes of the codes of one (token, KV head) row of K (or of V) of head_dim values.
constexpr int64_t KvRowBytes(KvType type, int64_t head_dim) {
  return head_dim * KvElementBits(type) / 8;
}

// Bytes of the scales of one such row: a float for int8 and fp8, an f16 a block of 32 for
// q4_0, two f16s a group for int4, else 0.
constexpr int64_t KvRowScaleBytes(KvType type, int64_t head_dim) {
  switch (type) {
    case KvType::kInt8:
    case KvType::kFp8: return 4;
    case KvType::kQ4_0: return head_dim / kKvQ4Block * 2;
    case KvType::kInt4: return head_dim / kKvInt4Group * 4;
    default: return 0;
  }
}

// Bytes of one (token, KV head) row of K (or of V), codes and scales.
constexpr int64_t KvRowTotalBytes(KvType type, int64_t head_dim) {
  return KvRowBytes(type, head_dim) + KvRowScaleBytes(type, head_dim);
}

// One block's K/V, codes and scales of every layer of KV group `group`, copied into another
// block of that group: beam search's copy-on-write of a forked sequence's partial last block.
struct KvBlockCopy {
  int32_t group = 0;
  int32_t src = 0;
  int32_t dst = 0;
};

// K and V blocks of n_layers layers in host or device memory; non-owning. K is
// [layer][block][offset in block][kv head][row of head_dim], V alike; the quantized types add
// k_scale and v_scale, KvRowScaleBytes per [layer][block][offset in block][kv head] (a float
// for int8 and fp8, q4_0's f16s, int4's f16 pairs). Every layer has num_blocks blocks, unless
// layer_blocks says otherwise: with KV groups of different pool sizes (kernels/paged_kv.h),
// layer l has the blocks [layer_blocks[l], layer_blocks[l + 1]) of the whole arrays
// (n_layers + 1 running totals, host memory). Where layers differ in shape or read another
// layer's KV (ModelConfig::kv_source_layers), layer_views holds each layer's own view
// (n_layers of them, host memory; a reader's is its source's) and the fields above describe
// layer 0. The kernels take one layer's view (n_layers 1, from Layer).
//
// v_in_k: multi-head latent attention's cache (ModelConfig::mla): no V arrays; each K row is
// the latent then the roped key, and V is that same row (v and v_scale point at K's, v_type
// is K's), of which attention's consumer reads the latent part.
struct KvCacheView {
  KvType type = KvType::kF16;  // K's element type, and V's unless v_type differs
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_blocks = 0;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  void* k_scale = nullptr;  // the quantized types only
  void* v_scale = nullptr;
  const int64_t* layer_blocks = nullptr;
  int n_layers = 1;
  // V's element type (llama.cpp's -ctv beside -ctk): its codes and scales are laid out as
  // K's are for `type`, each array by its own row sizes.
  KvType v_type = type;
  const KvCacheView* layer_views = nullptr;
  bool v_in_k = false;

  // The blocks of layer `layer` alone.
  KvCacheView Layer(int layer) const {
    if (layer_views != nullptr) return layer_views[layer];
    const int64_t first = layer_blocks != nullptr ? layer_blocks[layer] : layer * num_blocks;
    const int64_t count =
        layer_blocks != nullptr ? layer_blocks[layer + 1] - layer_blocks[layer] : num_blocks;
    const int64_t rows_before = first * block_size * n_kv_heads;
    // One of K's or V's arrays (codes or scales), `bytes` a row, from layer `layer` on.
    const auto skip = [rows_before](void* data, int64_t bytes) -> void* {
      return bytes > 0 ? static_cast<uint8_t*>(data) + rows_before * bytes : nullptr;
    };
    KvCacheView layer_view{type,
                           skip(k, KvRowBytes(type, head_dim)),
                           skip(v, KvRowBytes(v_type, head_dim)),
                           count,
                           block_size,
                           n_kv_heads,
                           head_dim,
                           skip(k_scale, KvRowScaleBytes(type, head_dim)),
                           skip(v_scale, KvRowScaleBytes(v_type, head_dim)),
                           nullptr,
                           1,
                           v_type,
                           nullptr,
                           v_in_k};
    if (v_in_k) {
      layer_view.v = layer_view.k;
      layer_view.v_scale = layer_view.k_scale;
    }
    return layer_view;
  }
};

}  // namespace tokenmill
