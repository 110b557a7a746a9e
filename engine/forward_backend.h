// Where a step's forward pass runs and where the KV memory it reads and writes lives: the
// CPU (ForwardPass over host memory) or an NVIDIA GPU (CudaForwardPass over device memory).
// The model runner sees only this; the scheduler and cache never do.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "cache/types.h"
#include "common/status.h"
#include "engine/engine_config.h"
#include "model/forward.h"
#include "model/model.h"

namespace tokenmill {

class LoraAdapter;  // model/lora.h

// Host memory a backend allocated (AllocateHostKv); freed with the last copy of `owner`.
struct HostKvMemory {
  std::shared_ptr<void> owner;
  std::span<uint8_t> bytes;
};

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;

  // The memory a fractional KV budget is a fraction of, measured now (after the weights).
  virtual StatusOr<int64_t> FreeMemoryBytes() const = 0;
  // Bytes of one KV block (K and V of every layer).
  virtual int64_t KvBytesPerBlock(KvType k_type, KvType v_type, int block_size) const = 0;
  // Allocates the zeroed KV pools, K of k_type and V of v_type, group_num_blocks[g] blocks for
  // each layer of KV group g (model/forward_input.h: NumKvGroups entries); called once, before
  // the first Run. InvalidArgument naming the flag for a type the device does not take.
  virtual Status AllocateKv(KvType k_type, KvType v_type,
                            std::span<const int64_t> group_num_blocks, int block_size) = 0;
  // Lets the memory of blocks [first_block, end_block) of KV group `group`'s pool go: an
  // elastic pool (cache/block_pool.h) gave them back. The CPU's pool is mapped memory, given
  // back page by page; a GPU's is allocated whole, so its pools are not elastic.
  virtual Status ReleaseKv(int group, int64_t first_block, int64_t end_block) {
    (void)group, (void)first_block, (void)end_block;
    return UnimplementedError("this device's KV pool cannot give memory back");
  }
  // Copies blocks of the pool (kernels/kv_cache_view.h), in order, before the next Run.
  virtual Status CopyKvBlocks(std::span<const KvBlockCopy> copies) = 0;
  // Block group_blocks[g] of each KV group g (every layer's K, V and scales: KvBlockBytes of
  // model/kv_cache.h; kReleasedBlock skips a group; one id alone is that block in every group,
  // when one table addresses them all) copied out of the pool into `out`, or from
  // `in` into it, for a tier below the pool: queued in order with the forward passes (on the
  // CPU, done at once). `in` may be reused on return; what ReadKvBlock copies into `out` is
  // there once FinishKvCopies returns.
  virtual int64_t KvBlockBytes() const = 0;
  virtual Status ReadKvBlock(std::span<const BlockId> group_blocks, std::span<uint8_t> out) = 0;
  virtual Status WriteKvBlock(std::span<const BlockId> group_blocks,
                              std::span<const uint8_t> in) = 0;
  virtual Status FinishKvCopies() = 0;
  // `bytes` of host memory for the KV host tier: page-locked on CUDA, so that its blocks'
  // copies run at full speed while the host goes on. ResourceExhausted when there is none.
  virtual StatusOr<HostKvMemory> AllocateHostKv(int64_t bytes) = 0;
  // ForwardPass::Run over the pool; logits are host memory.
  virtual Status Run(const ForwardInput& input, std::span<float> logits) = 0;
  // Run, but only each logit row's argmax (the first largest) comes back, one id per logit
  // row: on CUDA computed on the device, so a greedy step moves 4 bytes a row, not n_vocab
  // floats.
  virtual Status RunGreedy(const ForwardInput& input, std::span<int32_t> row_argmax) = 0;
  // The backend's host memory for `floats` logits, where Run's copy is fastest (page-locked
  // for CUDA); valid until the next call.
  virtual StatusOr<std::span<float>> LogitsBuffer(size_t floats) = 0;
  // A LoRA adapter the steps' sequences may name (ForwardInput::seq_loras) from now on, until
  // RemoveLora (before the adapter goes). The CPU reads the adapter's own memory; CUDA copies
  // its pairs to the device (ResourceExhausted when they do not fit).
  virtual Status AddLora(const LoraAdapter&) { return OkStatus(); }
  virtual void RemoveLora(const LoraAdapter&) {}
};

// The backend config.device asks for, with its weights in place (uploaded for CUDA).
// FailedPrecondition naming --device when that device is not in this build or machine.
StatusOr<std::unique_ptr<ForwardBackend>> CreateForwardBackend(const Model& model,
                                                               const EngineConfig& config);

// OK when `device` can run here: the CPU always; CUDA when this build has the backend and a
// GPU with a working driver is present.
Status CheckDeviceAvailable(Device device);

}  // namespace tokenmill
