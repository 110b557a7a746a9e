// LoRA adapters on the GPU: each adapter's pairs in device memory (A as f32, B transposed), an
// adapter a slot, and for each adapted base matrix a device table of one DeviceLoraPair per
// slot, which the CUDA blocks hand to LoraShrink and LoraExpand (kernels/cuda/lora.cu) with
// each token's slot: the tokens of every adapter in one launch (Punica's BGMV).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/lora_math.h"
#include "model/lora.h"

namespace tokenmill::cuda {

class CudaLoras {
 public:
  // Uploads `adapter`'s pairs and gives it a slot (an adapter given twice is an error). The
  // adapter must stay alive until Remove.
  Status Add(const LoraAdapter& adapter);
  // Frees its device copies and slot; a later step names it no more.
  void Remove(const LoraAdapter& adapter);

  bool empty() const { return adapters_.empty(); }
  // The slot of an added adapter; -1 for null (no adapter).
  StatusOr<int32_t> SlotOf(const LoraAdapter* adapter) const;
  // The device table (a pair per slot) of the base matrix whose data is `base`, and the
  // largest rank in it; none where no added adapter adapts that matrix.
  struct Table {
    const DeviceLoraPair* pairs = nullptr;
    int max_rank = 0;
  };
  std::optional<Table> Find(const uint8_t* base) const;
  // The largest rank of every added pair: the width of the shrink's scratch.
  int max_rank() const { return max_rank_; }
  // Changes whenever a table moves in device memory (a captured CUDA graph points at it).
  int64_t generation() const { return generation_; }

 private:
  struct Copy {
    int32_t slot = 0;
    std::vector<DeviceBuffer> buffers;  // each pair's A and Bᵀ
    std::unordered_map<const uint8_t*, DeviceLoraPair> pairs;  // by base data, device pointers
  };
  struct DeviceTable {
    DeviceBuffer pairs;  // one DeviceLoraPair per slot
    int max_rank = 0;
  };
  // Every table again from adapters_ (adapters come and go rarely: between steps).
  Status Rebuild();

  std::map<const LoraAdapter*, Copy> adapters_;
  std::unordered_map<const uint8_t*, DeviceTable> tables_;
  int max_rank_ = 0;
  int64_t generation_ = 0;
};

}  // namespace tokenmill::cuda
