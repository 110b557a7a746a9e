// The forward pass on an NVIDIA GPU: the model's family's graph (model/arch/<family>.cc) over
// the CUDA blocks (cuda_blocks.h), with the contract of ForwardPass (model/forward.h) -- the
// same ForwardInput (model/forward_input.h) and logits -- over a KV cache in device memory
// (CudaKvCache). It uploads the weights (cuda_weights.h) and each step's inputs, and captures
// decode steps as CUDA graphs; which families run is what their blocks need
// (PlanCudaGraph, cuda_graph_plan.h).
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/device_buffer.h"
#include "model/cuda/cuda_blocks.h"
#include "model/cuda/cuda_graph_plan.h"
#include "model/cuda/cuda_lora.h"
#include "model/cuda/cuda_weights.h"
#include "model/forward_input.h"
#include "model/model.h"

namespace tokenmill::cuda {

struct CudaForwardOptions {
  // Steps of at least this many tokens multiply by cuBLAS over bf16 copies of the weights
  // (which then take device memory too). 0: never -- every product is the GEMV kernel's, so a
  // token's logits are bit-identical whatever else is batched (docs/design.md section 3).
  int cublas_min_tokens = 0;
  // Decode steps (one token per sequence) replay a CUDA graph captured once per (tokens,
  // logit rows): one launch instead of ~15 per layer. Same kernels, same results.
  bool cuda_graphs = true;
  // > 0: the scratch of a step of this many tokens (with max_logit_rows logit rows), the
  // attention's split-K workspace included, is reserved by Create, before the engine sizes the
  // KV pool from the memory left free; later steps grow it only past these sizes.
  int64_t max_step_tokens = 0;
  int64_t max_logit_rows = 0;
};

// Holds the device weights, a stream and scratch activations: one Run at a time.
class CudaForwardPass {
 public:
  // Uploads the weights; FailedPrecondition without a CUDA device, Unimplemented naming the
  // blocks of the model's graph that CUDA has no kernel for (PlanCudaGraph), InvalidArgument
  // for a model shape the kernels do not take (head_dim > 256, more than 16 query heads per
  // KV head; latent rows past 576 values: AttentionShapeFits of kernel_math.h).
  static StatusOr<std::unique_ptr<CudaForwardPass>> Create(const Model& model,
                                                           CudaForwardOptions options = {});
  ~CudaForwardPass();
  CudaForwardPass(const CudaForwardPass&) = delete;
  CudaForwardPass& operator=(const CudaForwardPass&) = delete;

  // As ForwardPass::Run; `kv` holds device memory (CudaKvCache::view()), `logits` is host
  // memory receiving logit_rows.size() rows of n_vocab floats.
  Status Run(const ForwardInput& input, const KvCacheView& kv, std::span<float> logits);

  // The same step, but only each logit row's argmax comes back (greedy decoding moves 4 bytes
  // per row instead of n_vocab floats).
  Status RunGreedy(const ForwardInput& input, const KvCacheView& kv, std::span<int32_t> token_ids);

  // LoRA adapters the steps' sequences may name (ForwardInput::seq_loras): `adapter`'s pairs
  // copied to the device now; RemoveLora frees them, before the adapter goes.
  Status AddLora(const LoraAdapter& adapter) { return loras_.Add(adapter); }
  void RemoveLora(const LoraAdapter& adapter) { loras_.Remove(adapter); }

  int64_t weight_bytes() const { return weights_.bytes; }
  // The stream the steps run on, in order: copies of KV blocks queued on it are ordered with
  // them.
  cudaStream_t stream() const { return stream_; }
  // Decode-step graphs captured so far (one per batch shape while nothing reallocates).
  int64_t num_graph_captures() const { return num_graph_captures_; }

 private:
  CudaForwardPass(const Model& model, CudaForwardOptions options, CudaGraphPlan plan);
  Status Init();
  // Runs the layers and leaves the logits of the logit rows in blocks_->logits() (device).
  Status Forward(const ForwardInput& input, const KvCacheView& kv);
  // The hidden rows (ForwardInput::hidden_rows) after Forward: their residual rows queued for
  // the host, then, once the stream is done, output-normed there.
  Status QueueHiddenRows(const ForwardInput& input);
  void NormHiddenRows(const ForwardInput& input) const;
  Status UploadStep(const ForwardInput& input);
  // Enqueues the family's graph over the CUDA blocks for a step whose inputs are uploaded and
  // buffers sized.
  Status EnqueueStep(const KvCacheView& kv, int64_t n_tokens, int64_t n_logits);
  Status LaunchDecodeGraph(const KvCacheView& kv, int64_t n_tokens, int64_t n_logits);
  // Reserve that also invalidates the captured graphs when memory moves.
  Status Grow(DeviceBuffer& buffer, int64_t bytes);
  // Changes whenever memory a captured graph points at moves (this pass's or the blocks').
  int64_t BufferGeneration() const {
    return buffer_generation_ + blocks_->generation() + loras_.generation();
  }

  const Model& model_;
  CudaForwardOptions options_;
  cudaStream_t stream_ = nullptr;
  DeviceModelWeights weights_;
  CudaGraphPlan plan_;
  CublasGemm gemm_;
  CudaLoras loras_;
  std::unique_ptr<CudaForwardBlocks> blocks_;  // over weights_, plan_, gemm_ and loras_
  // Step inputs (one upload per step), grown to the largest step.
  std::vector<uint8_t> staging_;
  DeviceBuffer step_;
  DeviceBatch d_batch_;
  std::vector<DeviceBlockTable> d_tables_;  // per KV group
  CudaStep d_step_;                         // what the blocks read of the step
  DeviceBuffer argmax_;
  bool decode_only_ = false;
  struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    int64_t generation = -1;
    std::vector<int64_t> kv;                 // CapturedKvFields of the view it was captured with
    // As captured: the LoRA slots (null without adapters), then each KV group's kv_indices.
    std::vector<const int32_t*> step_arrays;
  };
  std::map<std::pair<int64_t, int64_t>, DecodeGraph> graphs_;
  int64_t buffer_generation_ = 0;
  size_t indices_stride_ = 0;  // int32s per KV group's kv_indices in step_; only grows
  int64_t num_graph_captures_ = 0;
};

}  // namespace tokenmill::cuda
