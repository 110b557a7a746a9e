#include "model/cuda/cuda_kv_cache.h"

#include <string>

#include "kernels/kv_type.h"
#include "model/forward_input.h"

namespace tokenmill::cuda {

int64_t CudaKvCache::BytesPerBlock(const ModelConfig& config, KvType type, int block_size) {
  // K and V of every layer: each (token, KV head) row's elements and, for int8/fp8, its scale;
  // K alone for a latent cache (KvBytesPerToken counts no V there).
  return KvBytesPerToken(config, type, type) * block_size;
}

Status CheckKvTypeForLatentOnCuda(const ModelConfig& config, KvType type) {
  if (config.HasLatentKv() && (type == KvType::kQ4_0 || type == KvType::kInt4)) {
    return InvalidArgumentError(
        "the KV cache type " + std::string(KvTypeName(type)) +
        " does not run on CUDA for multi-head latent attention (this '" + config.arch_name +
        "' model's latent cache): with --device cuda use f16, f32, int8 or fp8, or serve it on "
        "the CPU");
  }
  return OkStatus();
}

StatusOr<CudaKvCache> CudaKvCache::Create(const ModelConfig& config, KvType type,
                                          int64_t num_blocks, int block_size) {
  return Create(config, type, std::vector<int64_t>(NumKvGroups(config), num_blocks), block_size);
}

StatusOr<CudaKvCache> CudaKvCache::Create(const ModelConfig& config, KvType type,
                                          std::span<const int64_t> group_num_blocks,
                                          int block_size) {
  if (static_cast<int>(group_num_blocks.size()) != NumKvGroups(config)) {
    return InvalidArgumentError("KV pools for " + std::to_string(group_num_blocks.size()) +
                                " groups; the model has " + std::to_string(NumKvGroups(config)));
  }
  TM_RETURN_IF_ERROR(CheckKvTypeOnDevice(type, /*cuda=*/true, "the KV cache type"));
  TM_RETURN_IF_ERROR(CheckKvTypeFitsLayers(config, type));  // q4_0 / int4: blocks of 32
  TM_RETURN_IF_ERROR(CheckKvTypeForLatentOnCuda(config, type));
  // Multi-head latent attention: K alone, V the latent part of its rows (v_in_k).
  const bool v_in_k = config.HasLatentKv();
  CudaKvCache cache;
  cache.layer_blocks_.assign(1, 0);
  for (int layer = 0; layer < config.n_layers; ++layer) {
    cache.layer_blocks_.push_back(
        cache.layer_blocks_.back() +
        group_num_blocks[static_cast<size_t>(KvGroupOfLayer(config, layer))]);
  }
  const int64_t rows = cache.layer_blocks_.back() * block_size * config.n_kv_heads;
  const int64_t bytes = rows * KvRowBytes(type, config.head_dim);
  TM_ASSIGN_OR_RETURN(cache.k_, DeviceBuffer::Allocate(bytes));
  TM_RETURN_IF_ERROR(cache.k_.Zero());
  if (!v_in_k) {
    TM_ASSIGN_OR_RETURN(cache.v_, DeviceBuffer::Allocate(bytes));
    TM_RETURN_IF_ERROR(cache.v_.Zero());
  }
  cache.view_ = KvCacheView{.type = type,
                            .k = cache.k_.data(),
                            .v = v_in_k ? cache.k_.data() : cache.v_.data(),
                            .num_blocks = group_num_blocks[0],
                            .block_size = block_size,
                            .n_kv_heads = config.n_kv_heads,
                            .head_dim = config.head_dim,
                            .layer_blocks = cache.layer_blocks_.data(),
                            .n_layers = config.n_layers,
                            .v_in_k = v_in_k};
  const int64_t scale_bytes = rows * KvRowScaleBytes(type, config.head_dim);
  if (scale_bytes > 0) {
    TM_ASSIGN_OR_RETURN(cache.k_scale_, DeviceBuffer::Allocate(scale_bytes));
    TM_RETURN_IF_ERROR(cache.k_scale_.Zero());
    if (!v_in_k) {
      TM_ASSIGN_OR_RETURN(cache.v_scale_, DeviceBuffer::Allocate(scale_bytes));
      TM_RETURN_IF_ERROR(cache.v_scale_.Zero());
    }
    cache.view_.k_scale = cache.k_scale_.data();
    cache.view_.v_scale = v_in_k ? cache.k_scale_.data() : cache.v_scale_.data();
  }
  return cache;
}

}  // namespace tokenmill::cuda
