// The KV pool in device memory (cudaMalloc), laid out as KvCacheStorage lays it out on the
// host; its view carries device pointers for CudaForwardPass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/kv_cache_view.h"
#include "model/config.h"

namespace tokenmill::cuda {

class CudaKvCache {
 public:
  // Zeroed K and V (and, for int8/fp8, their per-row scales) for num_blocks blocks of every
  // layer; ResourceExhausted when they do not fit in the device's memory. A latent cache
  // (ModelConfig::mla) allocates K alone: its view is v_in_k, V within K's rows; its 4-bit
  // types are refused (CheckKvTypeForLatentOnCuda).
  static StatusOr<CudaKvCache> Create(const ModelConfig& config, KvType type, int64_t num_blocks,
                                      int block_size);
  // group_num_blocks[g] blocks of each layer of KV group g, as KvCacheStorage lays them out.
  static StatusOr<CudaKvCache> Create(const ModelConfig& config, KvType type,
                                      std::span<const int64_t> group_num_blocks, int block_size);
  // Device bytes of one block (K and V with their scales, all layers; K alone for a latent
  // cache): what the CPU backend counts for the same type, so --kv-cache-memory gives both the
  // same block count.
  static int64_t BytesPerBlock(const ModelConfig& config, KvType type, int block_size);

  KvCacheView view() const { return view_; }

 private:
  std::vector<int64_t> layer_blocks_;  // host memory: the view's running totals
  KvCacheView view_;
  DeviceBuffer k_;
  DeviceBuffer v_;        // empty for a latent cache (v_in_k)
  DeviceBuffer k_scale_;  // the quantized types only
  DeviceBuffer v_scale_;
};

// The KV types CUDA's attention takes for a latent cache (multi-head latent attention): f16,
// f32, int8 and fp8; q4_0 and int4 are refused naming the type.
Status CheckKvTypeForLatentOnCuda(const ModelConfig& config, KvType type);

}  // namespace tokenmill::cuda
