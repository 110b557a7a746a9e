#include "engine/forward_backend.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>
#include <string>
#include <vector>

#include "engine/sampling/logits_processors.h"
#include "kernels/cpu/thread_pool.h"
#include "model/forward_input.h"
#include "model/kv_cache.h"

#if TOKENMILL_HAVE_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/device_buffer.h"
#include "model/cuda/cuda_forward.h"
#include "model/cuda/cuda_kv_cache.h"
#endif

namespace tokenmill {
namespace {

Status CopyHostBytes(void* dst, const void* src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return OkStatus();
}

// Block ids as model/kv_cache.h takes them, one a KV group of the model (kReleasedBlock stays
// negative: skipped); a single id is that block in every group (one table addresses them all).
std::vector<int64_t> GroupBlockIds(std::span<const BlockId> blocks, const ModelConfig& config) {
  if (blocks.size() == 1) {
    return std::vector<int64_t>(static_cast<size_t>(NumKvGroups(config)), blocks[0]);
  }
  return std::vector<int64_t>(blocks.begin(), blocks.end());
}

class CpuBackend final : public ForwardBackend {
 public:
  // `kv_on_demand`: the KV pool is elastic (EngineConfig::kv_memory_budget), its memory
  // committed as blocks are written; else all of it at AllocateKv: the server takes its memory
  // at startup, not under load.
  CpuBackend(const Model& model, CpuIsa isa, int num_threads, bool kv_on_demand)
      : model_(model),
        pool_(std::make_unique<ThreadPool>(num_threads)),
        forward_(model, CpuContext{&KernelTable(isa), pool_.get()}),
        kv_on_demand_(kv_on_demand) {}

  StatusOr<int64_t> FreeMemoryBytes() const override {
    return UnimplementedError("a fractional KV budget on the CPU is resolved by the caller");
  }
  int64_t KvBytesPerBlock(KvType k_type, KvType v_type, int block_size) const override {
    return KvBytesPerToken(model_.config(), k_type, v_type) * block_size;
  }
  Status AllocateKv(KvType k_type, KvType v_type, std::span<const int64_t> group_num_blocks,
                    int block_size) override {
    TM_RETURN_IF_ERROR(CheckKvTypeOnDevice(k_type, /*cuda=*/false, "--kv-cache-dtype"));
    TM_RETURN_IF_ERROR(CheckKvTypeOnDevice(v_type, /*cuda=*/false, "--kv-cache-dtype-v"));
    if (model_.config().HasLatentKv() && v_type != k_type) {
      return InvalidArgumentError(
          "--kv-cache-dtype-v: this model's multi-head latent attention keeps V within K (one "
          "latent row a token), so V takes --kv-cache-dtype's type; drop --kv-cache-dtype-v");
    }
    TM_RETURN_IF_ERROR(CheckKvTypeFitsLayers(model_.config(), k_type));
    TM_RETURN_IF_ERROR(CheckKvTypeFitsLayers(model_.config(), v_type));
    kv_ = std::make_unique<KvCacheStorage>(
        model_.config(), k_type, group_num_blocks, block_size, v_type,
        kv_on_demand_ ? KvCacheStorage::Commit::kOnWrite : KvCacheStorage::Commit::kAtOnce);
    return OkStatus();
  }
  Status ReleaseKv(int group, int64_t first_block, int64_t end_block) override {
    return kv_->Release(group, first_block, end_block);
  }
  Status CopyKvBlocks(std::span<const KvBlockCopy> copies) override {
    return tokenmill::CopyKvBlocks(kv_->view(), model_.config(), copies, CopyHostBytes);
  }
  int64_t KvBlockBytes() const override {
    return tokenmill::KvBlockBytes(kv_->view(), model_.config());
  }
  Status ReadKvBlock(std::span<const BlockId> group_blocks, std::span<uint8_t> out) override {
    return tokenmill::ReadKvBlock(kv_->view(), model_.config(),
                                  GroupBlockIds(group_blocks, model_.config()), out, CopyHostBytes);
  }
  Status WriteKvBlock(std::span<const BlockId> group_blocks,
                      std::span<const uint8_t> in) override {
    return tokenmill::WriteKvBlock(kv_->view(), model_.config(),
                                   GroupBlockIds(group_blocks, model_.config()), in, CopyHostBytes);
  }
  Status FinishKvCopies() override { return OkStatus(); }
  StatusOr<HostKvMemory> AllocateHostKv(int64_t bytes) override {
    // Zeroed now, so that its pages fault in at start and not in the engine's steps.
    std::shared_ptr<uint8_t[]> memory;
    try {
      memory = std::make_shared<uint8_t[]>(static_cast<size_t>(bytes));
    } catch (const std::bad_alloc&) {
      return ResourceExhaustedError("no " + std::to_string(bytes) +
                                    " bytes of memory for the KV host tier: lower "
                                    "--kv-cache-host-size");
    }
    const std::span<uint8_t> span(memory.get(), static_cast<size_t>(bytes));
    return HostKvMemory{.owner = std::move(memory), .bytes = span};
  }
  Status Run(const ForwardInput& input, std::span<float> logits) override {
    return forward_.Run(input, kv_->view(), logits);
  }
  Status RunGreedy(const ForwardInput& input, std::span<int32_t> row_argmax) override {
    if (row_argmax.size() != input.logit_rows.size()) {
      return InvalidArgumentError("RunGreedy needs one output id per logit row");
    }
    const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
    greedy_logits_.resize(row_argmax.size() * n_vocab);
    TM_RETURN_IF_ERROR(Run(input, greedy_logits_));
    for (size_t r = 0; r < row_argmax.size(); ++r) {
      row_argmax[r] = Argmax(std::span<const float>(greedy_logits_).subspan(r * n_vocab, n_vocab));
    }
    return OkStatus();
  }
  StatusOr<std::span<float>> LogitsBuffer(size_t floats) override {
    logits_.resize(floats);
    return std::span<float>(logits_);
  }

 private:
  const Model& model_;
  std::unique_ptr<ThreadPool> pool_;
  ForwardPass forward_;
  const bool kv_on_demand_;
  std::unique_ptr<KvCacheStorage> kv_;
  std::vector<float> logits_, greedy_logits_;
};

#if TOKENMILL_HAVE_CUDA
class CudaBackend final : public ForwardBackend {
 public:
  CudaBackend(const Model& model, std::unique_ptr<cuda::CudaForwardPass> forward)
      : model_(model), forward_(std::move(forward)) {}

  StatusOr<int64_t> FreeMemoryBytes() const override {
    TM_ASSIGN_OR_RETURN(auto info, cuda::DeviceMemoryInfo());
    return info.first;
  }
  int64_t KvBytesPerBlock(KvType k_type, KvType v_type, int block_size) const override {
    return (cuda::CudaKvCache::BytesPerBlock(model_.config(), k_type, block_size) +
            cuda::CudaKvCache::BytesPerBlock(model_.config(), v_type, block_size)) /
           2;
  }
  Status AllocateKv(KvType type, KvType v_type, std::span<const int64_t> group_num_blocks,
                    int block_size) override {
    if (v_type != type) {
      return InvalidArgumentError(
          "--kv-cache-dtype-v: the CUDA backend keeps K and V in one type; drop "
          "--kv-cache-dtype-v, or run on the CPU (--device cpu)");
    }
    TM_ASSIGN_OR_RETURN(cuda::CudaKvCache kv, cuda::CudaKvCache::Create(model_.config(), type,
                                                                        group_num_blocks,
                                                                        block_size));
    kv_ = std::make_unique<cuda::CudaKvCache>(std::move(kv));
    return OkStatus();
  }
  Status CopyKvBlocks(std::span<const KvBlockCopy> copies) override {
    return tokenmill::CopyKvBlocks(kv_->view(), model_.config(), copies, cuda::CopyDeviceToDevice);
  }
  int64_t KvBlockBytes() const override {
    return tokenmill::KvBlockBytes(kv_->view(), model_.config());
  }
  Status ReadKvBlock(std::span<const BlockId> group_blocks, std::span<uint8_t> out) override {
    return tokenmill::ReadKvBlock(kv_->view(), model_.config(),
                                  GroupBlockIds(group_blocks, model_.config()), out, OnStream());
  }
  Status WriteKvBlock(std::span<const BlockId> group_blocks,
                      std::span<const uint8_t> in) override {
    return tokenmill::WriteKvBlock(kv_->view(), model_.config(),
                                   GroupBlockIds(group_blocks, model_.config()), in, OnStream());
  }
  Status FinishKvCopies() override { return cuda::SynchronizeStream(forward_->stream()); }
  StatusOr<HostKvMemory> AllocateHostKv(int64_t bytes) override {
    auto memory = std::make_shared<cuda::PinnedBuffer>();
    TM_RETURN_IF_ERROR(memory->Reserve(bytes));
    const std::span<uint8_t> span(memory->as<uint8_t>(), static_cast<size_t>(bytes));
    return HostKvMemory{.owner = std::move(memory), .bytes = span};
  }
  Status Run(const ForwardInput& input, std::span<float> logits) override {
    return forward_->Run(input, kv_->view(), logits);
  }
  Status RunGreedy(const ForwardInput& input, std::span<int32_t> row_argmax) override {
    return forward_->RunGreedy(input, kv_->view(), row_argmax);
  }
  StatusOr<std::span<float>> LogitsBuffer(size_t floats) override {
    TM_RETURN_IF_ERROR(logits_.Reserve(static_cast<int64_t>(floats * sizeof(float))));
    return std::span<float>(logits_.as<float>(), floats);
  }
  Status AddLora(const LoraAdapter& adapter) override { return forward_->AddLora(adapter); }
  void RemoveLora(const LoraAdapter& adapter) override { forward_->RemoveLora(adapter); }

 private:
  // KV block copies on the steps' stream, ordered with them (no device-wide wait).
  CopyBytes OnStream() const {
    return [stream = forward_->stream()](void* dst, const void* src, int64_t bytes) {
      return cuda::CopyOnStream(dst, src, bytes, stream);
    };
  }

  const Model& model_;
  std::unique_ptr<cuda::CudaForwardPass> forward_;
  std::unique_ptr<cuda::CudaKvCache> kv_;
  cuda::PinnedBuffer logits_;
};
#endif

}  // namespace

Status CheckDeviceAvailable(Device device) {
  if (device == Device::kCpu) return OkStatus();
#if TOKENMILL_HAVE_CUDA
  if (cuda::CountDevices() == 0) {
    return FailedPreconditionError(
        "--device cuda: no usable CUDA device here (no GPU, or no driver); use --device cpu");
  }
  return OkStatus();
#else
  return FailedPreconditionError(
      "--device cuda: this build has no CUDA backend (nvcc was not found); use --device cpu");
#endif
}

StatusOr<std::unique_ptr<ForwardBackend>> CreateForwardBackend(const Model& model,
                                                               const EngineConfig& config) {
  TM_RETURN_IF_ERROR(CheckDeviceAvailable(config.device));
  if (config.device == Device::kCuda) {
#if TOKENMILL_HAVE_CUDA
    TM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaForwardPass> forward,
                        cuda::CudaForwardPass::Create(
                            model, cuda::CudaForwardOptions{
                                       .cublas_min_tokens = config.cuda_cublas_min_tokens,
                                       .max_step_tokens = config.scheduler.max_num_batched_tokens,
                                       .max_logit_rows = config.scheduler.max_num_seqs}));
    return std::unique_ptr<ForwardBackend>(new CudaBackend(model, std::move(forward)));
#endif
  }
  const int threads = config.num_threads > 0
                          ? config.num_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::unique_ptr<ForwardBackend>(
      new CpuBackend(model, config.isa.value_or(BestCpuIsa()), threads,
                     /*kv_on_demand=*/config.kv_memory_budget != nullptr));
}

}  // namespace tokenmill
