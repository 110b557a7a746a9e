// The blocks of model/arch/forward_blocks.h on an NVIDIA GPU: each enqueues its kernels
// (kernels/cuda/ops.h) on one stream and nothing else -- no host syncs, no allocations -- so
// that a whole step's blocks can be captured as one CUDA graph (CudaForwardPass). A block's
// weights are the device copies of the host matrices and vectors the family passes
// (DeviceWeightIndex). The first failure of a step is kept and ends it (FinishStep); a block
// the plan refused (cuda_graph_plan.h) is never reached.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"
#include "kernels/kv_cache_view.h"
#include "model/arch/forward_blocks.h"
#include "model/config.h"
#include "model/cuda/cuda_graph_plan.h"
#include "model/cuda/cuda_lora.h"
#include "model/cuda/cuda_weights.h"
#include "model/forward_input.h"

namespace tokenmill::cuda {

// One step's inputs on the device (CudaForwardPass::UploadStep) and its KV cache.
struct CudaStep {
  const int32_t* token_ids = nullptr;
  const int32_t* logit_rows = nullptr;
  const DeviceBatch* batch = nullptr;
  std::span<const DeviceBlockTable> tables;  // per KV group
  const KvCacheView* kv = nullptr;           // device memory
  int64_t n_tokens = 0;
  int64_t n_logits = 0;
  // Each token's and each logit row's LoRA adapter slot (CudaLoras; -1: none); null while no
  // adapter is loaded.
  const int32_t* lora_slots = nullptr;
  const int32_t* logit_lora_slots = nullptr;
};

class CudaForwardBlocks final : public ForwardBlocks {
 public:
  // What it reads must outlive it. cublas_min_tokens: CudaForwardOptions'. `loras`: the LoRA
  // adapters a step's tokens may run with (CudaStep::lora_slots).
  CudaForwardBlocks(const ModelConfig& config, const CudaGraphPlan& plan,
                    const DeviceModelWeights& weights, DeviceWeightIndex index,
                    cudaStream_t stream, CublasGemm& gemm, int cublas_min_tokens,
                    const CudaLoras& loras);

  // The RoPE tables of the plan's bases and, for a GeluFeedForward, GeluTanhGlu's table.
  Status Init();
  // Every scratch buffer grown for a step of n tokens, n_logits logit rows and up to
  // max_splits attention splits.
  Status GrowScratch(int64_t n, int64_t n_logits, int max_splits);
  // Counts the scratch reallocations: a captured graph points at the memory of its time.
  int64_t generation() const { return generation_; }

  // The step the next blocks enqueue; `step` and what it points at must outlive it.
  void BeginStep(const CudaStep& step);
  // The first error of the step's blocks, or OK.
  Status FinishStep() const { return status_; }
  // The logits of the step's logit rows (n_logits rows of n_vocab), on the device.
  const float* logits() const { return logits_.as<const float>(); }
  // The residual stream after the last layer (each token's row of n_embd), before the output
  // norm: embeddings take their rows from it.
  const float* residual() const { return x_.as<const float>(); }

  void BeginLayer(int layer) override { layer_ = layer; }
  void Embed(const WeightMatrix& token_embd, float scale) override;
  void Norm(std::span<const float> weight, const char* name) override;
  void ProjectQkv(const WeightMatrix& wq, const WeightMatrix& wk,
                  const WeightMatrix& wv) override;
  void AddQkvBias(std::span<const float> q_bias, std::span<const float> k_bias,
                  std::span<const float> v_bias) override;
  void HeadNorms(std::span<const float> q_norm, std::span<const float> k_norm) override;
  // Refused by PlanCudaGraph (no kernels yet): per-layer embeddings, a Q-only projection
  // (KV read from another layer), the value norm and the residual's scale.
  void PerLayerInputs(const PerLayerEmbeddings& w) override;
  void ProjectQ(const WeightMatrix& wq) override;
  void ValueNorm() override;
  void PerLayerEmbedding(const WeightMatrix& gate, const WeightMatrix& proj) override;
  void ScaleResidual(std::span<const float> scale) override;
  // Refused by PlanCudaGraph too: an encoder's blocks (bert).
  void AddEncoderInputs(const EncoderInputs& inputs) override;
  void LayerNorm(std::span<const float> weight, std::span<const float> bias,
                 const char* name) override;
  void GeluMlp(const WeightMatrix& up, std::span<const float> up_bias, const WeightMatrix& down,
               std::span<const float> down_bias) override;
  // Refused by PlanCudaGraph too: activation sparsity, AltUp and LAuReL (gemma3n).
  void SparseGeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                             const WeightMatrix& down, float std_multiplier) override;
  void AltUpStreams(std::span<const WeightMatrix> proj) override;
  void AltUpPredict(const AltUpWeights& w) override;
  void AltUpCorrect(const AltUpWeights& w, const WeightMatrix& per_layer_gate,
                    const WeightMatrix& per_layer_proj,
                    std::span<const float> per_layer_post_norm) override;
  void AltUpMerge(std::span<const WeightMatrix> unembd) override;
  void Laurel(const LaurelWeights& w) override;
  void AddLaurel() override;
  void Attention(QueryScale scale, std::span<const float> sinks) override;
  // Multi-head latent attention (deepseek2), the CPU's steps: the query (its LoRA or a plain
  // q) and kv_a, the latent's norm, RoPE of the roped parts, each head's k_b on its q_nope
  // (all heads in one grouped GEMV), the latent rows stored and attended (PagedAttention's
  // v_in_k instance, scores times mla.score_scale), each head's v_b on its latent output.
  void LatentAttention(const LatentAttentionWeights& w) override;
  void AttentionOutput(const WeightMatrix& wo, std::span<const float> bias) override;
  void PostNorm(std::span<const float> weight, const char* name) override;
  void SwiGluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                         const WeightMatrix& down) override;
  void GeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                       const WeightMatrix& down) override;
  // Routing, grouping, the grouped expert GEMVs and the weighted sum, all on the device
  // (moe.cu), plus qwen2moe's shared expert.
  void MoeFeedForward(const MoeWeights& w) override;
  void OaiMoeFeedForward(const MoeWeights& w) override;
  // With next_norm: the residual add fused with that norm (AddRmsNorm), always.
  void AddResidual(const char* name, std::span<const float> next_norm) override;
  void Logits(std::span<const float> output_norm, const WeightMatrix& output) override;

 private:
  // A matmul's input: the floats, their q8_1 copy for the GEMVs of quantized weights (null
  // where cuBLAS takes the step's matmuls), and each row's LoRA slot (the step's tokens', or
  // its logit rows' for the output head; null: no adapter loaded).
  struct MatmulInput {
    const float* x = nullptr;
    const uint8_t* x_q8 = nullptr;
    const int32_t* lora_slots = nullptr;
  };
  // Runs `enqueue` unless the step already failed, keeping its error.
  template <typename Enqueue>
  void Run(Enqueue&& enqueue) {
    if (status_.ok()) status_ = enqueue();
  }
  StatusOr<const DeviceWeight*> Device(const WeightMatrix& w) const;
  StatusOr<const float*> Device(std::span<const float> v) const;
  Status Grow(DeviceBuffer& buffer, int64_t bytes);
  bool UsesCublas(int64_t n_tokens) const {
    return cublas_min_tokens_ > 0 && n_tokens >= cublas_min_tokens_;
  }
  // x (n_tokens rows of cols) as the input of the matmuls that read it, quantized once for all.
  StatusOr<MatmulInput> PrepareInput(const float* x, int64_t n_tokens, int64_t cols);
  Status Matmul(const DeviceWeight& w, const MatmulInput& in, int64_t n_tokens, float* y);
  // The product, then each row's LoRA update where its adapter adapts w.
  Status Matmul(const WeightMatrix& w, const MatmulInput& in, int64_t n_tokens, float* y);
  // The dense feed-forward of h into proj through gate and up, `gelu` or SwiGLU between.
  Status GatedFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                          const WeightMatrix& down, bool gelu);
  Status ExpertsFeedForward(const DeviceMoeWeights& w);
  Status LatentAttentionSteps(const DeviceLatentAttentionWeights& w);
  // Each head's matrix of w (n_heads stacked) over its rows of x ([head][token], cols each),
  // `groups` the heads as experts of n_tokens rows each: y gets [head][token] rows of w.rows.
  Status PerHeadMatmul(const DeviceWeight& w, const DeviceExpertGroups& groups, const float* x,
                       int64_t n_tokens, float* y);
  // Each expert's GEMV over its grouped slots (quantized experts over q8_1 activations).
  Status GroupedMatmul(const DeviceWeight& w, const float* x, const uint8_t* x_q8, bool per_token,
                       const DeviceExpertGroups& groups, float* y);

  const ModelConfig& c_;
  const CudaGraphPlan& plan_;
  const DeviceModelWeights& weights_;
  const DeviceWeightIndex index_;
  cudaStream_t stream_;
  CublasGemm& gemm_;
  const int cublas_min_tokens_;
  const CudaLoras& loras_;
  std::vector<DeviceBuffer> rope_inv_freq_;  // per plan_.rope_bases
  std::vector<DeviceRope> layer_rope_;       // per layer, pointing into rope_inv_freq_
  std::vector<DeviceRope> latent_rope_;      // the same over heads of n_rot (mla)
  DeviceBuffer gelu_table_;                  // GeluTanhGlu's, when plan_.gelu
  // Scratch activations, grown to the largest step.
  DeviceBuffer x_, h_, q_, k_, v_, attn_, proj_, gate_, up_, final_, logits_, workspace_;
  DeviceBuffer q8_;  // PrepareInput's q8_1 activations
  DeviceBuffer lora_mid_;  // LoraShrink's, rows x loras_.max_rank()
  // A mixture's step: router logits (then probs), each token's experts and weights, the
  // grouping (DeviceExpertGroups), the slots' gate/up/down rows, the shared expert's gate logit
  // and output.
  DeviceBuffer moe_logits_, moe_experts_, moe_weights_, moe_begin_, moe_order_, moe_slot_;
  DeviceBuffer moe_gate_, moe_up_, moe_down_, shared_logit_, shared_out_;
  // Multi-head latent attention's step: the query's LoRA and the query, kv_a's rows, the
  // query's and the key's roped parts, the latent, the per-head inputs and outputs
  // ([head][token]) and their groups (UniformExpertGroups).
  DeviceBuffer mla_q_a_, mla_q_, mla_kv_, mla_pe_, mla_kpe_, mla_latent_, mla_in_, mla_out_;
  DeviceBuffer mla_begin_;
  int64_t generation_ = 0;
  // The step.
  CudaStep step_;
  int layer_ = 0;
  Status status_;
  // The norm weight h already holds RmsNorm(x) with (AddResidual's fusion), or null.
  const float* h_norm_ = nullptr;
};

}  // namespace tokenmill::cuda
