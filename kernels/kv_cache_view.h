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
enum class KvType { kF16, kF32, kInt8, kFp8 };

// Bytes of one K (or V) element.
constexpr int64_t KvElementBytes(KvType type) {
  switch (type) {
    case KvType::kF16: return 2;
    case KvType::kF32: return 4;
    case KvType::kInt8: return 1;
    case KvType::kFp8: return 1;
  }
  return 0;
}

// Bytes of the scales of one (token, KV head) row of K (or of V): 4 for int8 and fp8, else 0.
constexpr int64_t KvScaleBytes(KvType type) {
  return type == KvType::kInt8 || type == KvType::kFp8 ? sizeof(float) : 0;
}

// K and V blocks of n_layers layers in host or device memory; non-owning. K is
// [layer][block][offset in block][kv head][head_dim], V alike; int8 and fp8 add k_scale and
// v_scale, one float per [layer][block][offset in block][kv head]. Every layer has num_blocks
// blocks, unless layer_blocks says otherwise: with KV groups of different pool sizes
// (kernels/paged_kv.h), layer l has the blocks [layer_blocks[l], layer_blocks[l + 1]) of the
// whole arrays (n_layers + 1 running totals, host memory). The kernels take one layer's view
// (n_layers 1, from Layer).
struct KvCacheView {
  KvType type = KvType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_blocks = 0;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float* k_scale = nullptr;  // int8 and fp8 only
  float* v_scale = nullptr;  // int8 and fp8 only
  const int64_t* layer_blocks = nullptr;
  int n_layers = 1;

  // The blocks of layer `layer` alone.
  KvCacheView Layer(int layer) const {
    const int64_t first = layer_blocks != nullptr ? layer_blocks[layer] : layer * num_blocks;
    const int64_t count =
        layer_blocks != nullptr ? layer_blocks[layer + 1] - layer_blocks[layer] : num_blocks;
    const int64_t rows_before = first * block_size * n_kv_heads;
    const int64_t bytes_before = rows_before * head_dim * KvElementBytes(type);
    const bool scaled = KvScaleBytes(type) > 0;
    return KvCacheView{type,
                       static_cast<uint8_t*>(k) + bytes_before,
                       static_cast<uint8_t*>(v) + bytes_before,
                       count,
                       block_size,
                       n_kv_heads,
                       head_dim,
                       scaled ? k_scale + rows_before : nullptr,
                       scaled ? v_scale + rows_before : nullptr,
                       nullptr,
                       1};
  }
};

}  // namespace tokenmill
