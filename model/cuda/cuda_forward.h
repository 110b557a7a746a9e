// The forward pass on an NVIDIA GPU of the dense families (llama, qwen2, phi3, qwen3, gemma,
// gemma2, gemma3) and the mixtures of experts (Mixtral, qwen3moe, qwen2moe): the blocks of
// CudaGraphPlan, with the contract of ForwardPass (model/forward.h)
// -- the same ForwardInput (model/forward_input.h) and logits -- over a KV cache in device
// memory (CudaKvCache).
// Kernels are those of kernels/cuda/ops.h; weights live on the device (cuda_weights.h).
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
#include "model/cuda/cuda_graph_plan.h"
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
  // Uploads the weights; FailedPrecondition without a CUDA device, Unimplemented for a family
  // the pass does not run (PlanCudaGraph), InvalidArgument for a model shape the kernels do
  // not take (head_dim > 256, more than 16 query heads per KV head).
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

  int64_t weight_bytes() const { return weights_.bytes; }
  // Decode-step graphs captured so far (one per batch shape while nothing reallocates).
  int64_t num_graph_captures() const { return num_graph_captures_; }

 private:
  CudaForwardPass(const Model& model, CudaForwardOptions options, CudaGraphPlan plan);
  Status Init();
  // Runs the layers and leaves the logits of the logit rows in logits_ (device).
  Status Forward(const ForwardInput& input, const KvCacheView& kv);
  Status UploadStep(const ForwardInput& input);
  // Enqueues the kernels of a step whose inputs are uploaded and buffers sized.
  Status EnqueueLayers(const KvCacheView& kv, int64_t n_tokens, int64_t n_logits);
  Status LaunchDecodeGraph(const KvCacheView& kv, int64_t n_tokens, int64_t n_logits);
  // Reserve that also invalidates the captured graphs when memory moves.
  Status Grow(DeviceBuffer& buffer, int64_t bytes);
  // Every scratch buffer grown for a step of n tokens, n_logits logit rows and up to
  // max_splits attention splits.
  Status GrowScratch(int64_t n, int64_t n_logits, int max_splits);
  // A matmul's input: the floats, and their q8_1 copy for the GEMVs of quantized weights
  // (null where cuBLAS takes the step's matmuls).
  struct MatmulInput {
    const float* x = nullptr;
    const uint8_t* x_q8 = nullptr;
  };
  // x (n_tokens rows of cols) as the input of the matmuls that read it, quantized once for all.
  StatusOr<MatmulInput> PrepareInput(const float* x, int64_t n_tokens, int64_t cols);
  Status Matmul(const DeviceWeight& w, const MatmulInput& in, int64_t n_tokens, float* y);
  // The dense feed-forward of the normed h (`in`) into proj, through gate and up.
  Status DenseFeedForward(const DeviceLayerWeights& l, const MatmulInput& in, int64_t n,
                          float* gate, float* up, float* proj);
  // A mixture-of-experts feed-forward of the normed h (n tokens, `in` its matmul input) into
  // proj: routing, grouping, the grouped expert GEMVs and the weighted sum, all on the device
  // (moe.cu), plus qwen2moe's shared expert.
  Status MoeFeedForward(const DeviceMoeWeights& w, const float* h, const MatmulInput& in,
                        int64_t n, float* proj);
  // Each expert's GEMV over its grouped slots (quantized experts over q8_1 activations).
  Status GroupedMatmul(const DeviceWeight& w, const float* x, const uint8_t* x_q8, bool per_token,
                       const DeviceExpertGroups& groups, float* y);
  bool UsesCublas(int64_t n_tokens) const {
    return options_.cublas_min_tokens > 0 && n_tokens >= options_.cublas_min_tokens;
  }

  const Model& model_;
  CudaForwardOptions options_;
  cudaStream_t stream_ = nullptr;
  DeviceModelWeights weights_;
  CudaGraphPlan plan_;
  std::vector<DeviceBuffer> rope_inv_freq_;  // per plan_.rope_bases
  std::vector<DeviceRope> layer_rope_;       // per layer, pointing into rope_inv_freq_
  DeviceBuffer gelu_table_;                  // GeluTanhGlu's, when plan_.gelu
  CublasGemm gemm_;
  // Step inputs (one upload per step) and scratch activations, grown to the largest step.
  std::vector<uint8_t> staging_;
  DeviceBuffer step_;
  const int32_t* d_token_ids_ = nullptr;
  const int32_t* d_logit_rows_ = nullptr;
  DeviceBatch d_batch_;
  std::vector<DeviceBlockTable> d_tables_;  // per KV group
  DeviceBuffer x_, h_, q_, k_, v_, attn_, proj_, gate_, up_, final_, logits_, workspace_, argmax_;
  DeviceBuffer q8_;  // PrepareInput's q8_1 activations
  // A mixture's step: router logits (then probs), each token's experts and weights, the
  // grouping (DeviceExpertGroups), the slots' gate/up/down rows, the shared expert's gate logit
  // and output.
  DeviceBuffer moe_logits_, moe_experts_, moe_weights_, moe_begin_, moe_order_, moe_slot_;
  DeviceBuffer moe_gate_, moe_up_, moe_down_, shared_logit_, shared_out_;
  bool decode_only_ = false;
  struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    int64_t generation = -1;
    const void* kv_k = nullptr;
    std::vector<const int32_t*> kv_indices;  // per KV group, as captured
  };
  std::map<std::pair<int64_t, int64_t>, DecodeGraph> graphs_;
  int64_t buffer_generation_ = 0;
  size_t indices_stride_ = 0;  // int32s per KV group's kv_indices in step_; only grows
  int64_t num_graph_captures_ = 0;
};

}  // namespace tokenmill::cuda
