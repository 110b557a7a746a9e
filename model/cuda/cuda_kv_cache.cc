#include "model/cuda/cuda_kv_cache.h"

namespace tokenmill::cuda {

int64_t CudaKvCache::BytesPerBlock(const ModelConfig& config, KvType type, int block_size) {
  return 2 * static_cast<int64_t>(config.n_layers) * block_size * config.kv_dim() *
         KvElementBytes(type);
}

StatusOr<CudaKvCache> CudaKvCache::Create(const ModelConfig& config, KvType type,
                                          int64_t num_blocks, int block_size) {
  if (type != KvType::kF16 && type != KvType::kF32) {
    return InvalidArgumentError("the CUDA backend keeps KV as f16 or f32; pick one of those");
  }
  CudaKvCache cache;
  const int64_t bytes = num_blocks * BytesPerBlock(config, type, block_size) / 2;
  TM_ASSIGN_OR_RETURN(cache.k_, DeviceBuffer::Allocate(bytes));
  TM_ASSIGN_OR_RETURN(cache.v_, DeviceBuffer::Allocate(bytes));
  TM_RETURN_IF_ERROR(cache.k_.Zero());
  TM_RETURN_IF_ERROR(cache.v_.Zero());
  cache.view_ = KvCacheView{type,       cache.k_.data(),   cache.v_.data(),   num_blocks,
                            block_size, config.n_layers, config.n_kv_heads, config.head_dim};
  return cache;
}

}  // namespace tokenmill::cuda
