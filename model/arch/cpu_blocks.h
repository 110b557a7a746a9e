// The blocks of forward_blocks.h on the CPU, as ops over one step's activations: they own the
// kernel calls, the scratch, the fusion of parallel regions and the tap.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/kv_cache_view.h"
#include "model/arch/forward_blocks.h"
#include "model/arch/moe.h"
#include "model/config.h"
#include "model/forward_input.h"
#include "model/weights.h"

namespace tokenmill {

struct LoraPair;  // model/lora.h

// Which kernels compute: the fast ones of a CpuContext over model.cpu_weights() (Q4_1 and
// Q8_0 regrouped), or the scalar references over model.weights() (float activations, the
// file's rows dequantized: slow, the oracle for tests).
enum class KernelMode { kFast, kReference };

// Shown each intermediate activation (named as llama.cpp's graph names them), n_rows rows
// of row_size floats; it may overwrite them (to feed each op another engine's inputs).
using ActivationTap = std::function<void(const char* name, int layer, float* data,
                                         int64_t n_rows, int64_t row_size)>;

// The blocks over the activations of one step at a time; its scratch grows to the largest
// step seen.
class CpuForwardBlocks final : public ForwardBlocks {
 public:
  CpuForwardBlocks(const ModelConfig& config, std::span<const float> rope_freqs,
                   CpuContext ctx, KernelMode mode);

  void set_tap(ActivationTap tap) { tap_ = std::move(tap); }

  // Grows the scratch for the step and makes it the one the blocks compute, until the next
  // BeginStep: its tokens, the KV cache and where its logits go (logit_rows.size() rows of
  // n_vocab). All three must outlive the step.
  void BeginStep(const ForwardInput& input, const KvCacheView& kv, std::span<float> logits);
  void BeginLayer(int layer) override;

  // x = the rows of token_embd for the step's tokens, times `scale` (Gemma's √n_embd) unless
  // 1, shown as inp_scaled.
  void Embed(const WeightMatrix& token_embd, float scale) override;
  // h = RmsNorm(x) with `weight`, shown as `name`.
  void Norm(std::span<const float> weight, const char* name) override;
  void AddEncoderInputs(const EncoderInputs& inputs) override;
  void LayerNorm(std::span<const float> weight, std::span<const float> bias,
                 const char* name) override;
  void GeluMlp(const WeightMatrix& up, std::span<const float> up_bias, const WeightMatrix& down,
               std::span<const float> down_bias) override;
  // The per-layer embeddings' inputs of every layer, shown as inp_per_layer (n_layers x
  // width a token).
  void PerLayerInputs(const PerLayerEmbeddings& w) override;
  // q, k, v = h times each matrix (one parallel pass on the fast path).
  void ProjectQkv(const WeightMatrix& wq, const WeightMatrix& wk,
                  const WeightMatrix& wv) override;
  void ProjectQ(const WeightMatrix& wq) override;
  void AddQkvBias(std::span<const float> q_bias, std::span<const float> k_bias,
                  std::span<const float> v_bias) override;
  // Each head of q and of k RMS-normed with its weight (head_dim), before RoPE: Qcur_normed,
  // Kcur_normed.
  void HeadNorms(std::span<const float> q_norm, std::span<const float> k_norm) override;
  // Vcur_normed.
  void ValueNorm() override;
  // RoPE on q and k (the layer's own, ModelConfig::rope_layers), k and v stored in this
  // layer's KV slots, then attention of each token over its sequence's KV (its window in a
  // sliding-window layer, scores soft-capped by attn_softcap): the attention output. Shows
  // Qraw, Kraw (before RoPE), Qcur, Kcur, Vcur and kqv_out. scale.factor > 0: q is
  // multiplied by it after RoPE and the attention scales q·k by 1 (may_scale_scores does not
  // matter here); 0: by 1 / sqrt(head_dim). Then, when the config sets attn_temp_scale
  // (mistral3), each token's q is multiplied by its AttentionTemperature (Qcur shows q after
  // both). `sinks`: the layer's attention-sink logits, one per query head (gpt-oss), or none.
  void Attention(QueryScale scale, std::span<const float> sinks) override;
  // Shows q (the query before its heads are split), kv_cmpr_pe, Qcur and Kcur (absorbed and
  // roped, as stored) and kqv_out (after v_b).
  void LatentAttention(const LatentAttentionWeights& w) override;
  // Block output = attention output times wo, plus `bias` unless empty (gpt-oss), shown as
  // attn_out.
  void AttentionOutput(const WeightMatrix& wo, std::span<const float> bias) override;
  // Block output = RmsNorm(block output) with `weight` (Gemma's post-norms), shown as `name`.
  void PostNorm(std::span<const float> weight, const char* name) override;
  // Block output = down(SiLU(gate(h)) * up(h)), showing ffn_gate, ffn_up, ffn_swiglu, ffn_out.
  void SwiGluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                         const WeightMatrix& down) override;
  // Block output = down(GELU-tanh(gate(h)) * up(h)) as llama.cpp computes it (GeluTanhGlu),
  // showing ffn_gate, ffn_up, ffn_geglu, ffn_out.
  void GeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                       const WeightMatrix& down) override;
  // Block output = the mixture of experts of h (ModelConfig::experts, model/arch/moe.h): the
  // router's logits (ffn_moe_logits) routed per token (RouteToken; ffn_moe_weights), the
  // step's tokens grouped by expert and every routed expert's SwiGLU run over its tokens
  // together, all experts in one parallel pass (MatmulGroups; experts no token chose are not
  // read), then each token's expert outputs times their weights summed in the order of its
  // choices (ffn_moe_out): the same sum whatever else the step routes. With a shared expert,
  // its SwiGLU is added, times the sigmoid of shared_gate_inp · h (as silu(g) / g,
  // llama.cpp's) where it has a gate, shown as ffn_out.
  void MoeFeedForward(const MoeWeights& w) override;
  // The same mixture with gpt-oss's clamped SwiGLU between each expert's projections
  // (ggml_swiglu_oai with llama.cpp's alpha 1.702 and limit 7; ffn_moe_swiglu_oai) and the
  // experts' biases of MoeWeights added where llama.cpp's ggml_add_id adds them.
  void OaiMoeFeedForward(const MoeWeights& w) override;
  // x += block output, shown as `name`. `next_norm`: the weight of the Norm the graph takes
  // next (empty if none); when no tap watches, it is computed in the same parallel region
  // and that Norm finds it done.
  void AddResidual(const char* name, std::span<const float> next_norm) override;
  // Shows per_layer_embd (before the family's PostNorm).
  void PerLayerEmbedding(const WeightMatrix& gate, const WeightMatrix& proj) override;
  // Shows out_scaled.
  void ScaleResidual(std::span<const float> scale) override;
  // Shows ffn_gate, ffn_up, ffn_geglu (after the sparsity), ffn_out.
  void SparseGeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                             const WeightMatrix& down, float std_multiplier) override;
  // Show inp_stacked (every stream), predictions, corrected, altup_merged.
  void AltUpStreams(std::span<const WeightMatrix> proj) override;
  void AltUpPredict(const AltUpWeights& w) override;
  void AltUpCorrect(const AltUpWeights& w, const WeightMatrix& per_layer_gate,
                    const WeightMatrix& per_layer_proj,
                    std::span<const float> per_layer_post_norm) override;
  void AltUpMerge(std::span<const WeightMatrix> unembd) override;
  // Shows laurel_out; AddLaurel attn_laurel.
  void Laurel(const LaurelWeights& w) override;
  void AddLaurel() override;
  // The final norm of x's logit rows (result_norm), then the logits: those rows times output,
  // soft-capped by final_softcap if set.
  void Logits(std::span<const float> output_norm, const WeightMatrix& output) override;

 private:
  // The scratch `buffer` holds at least n floats.
  static void Grow(std::vector<float>& buffer, int64_t n);
  // fn(begin, end) over token ranges covering [0, n_tokens): spread over the pool when the
  // step has enough tokens to pay for the barrier, else one call on this thread.
  void ForTokens(const std::function<void(int64_t, int64_t)>& fn);
  // y = w·x for n_tokens rows (the step's tokens, or `token_of_row`'s when given), plus each
  // row's LoRA update where its sequence's adapter adapts w (ApplyLora).
  void MatmulOp(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                std::span<const int32_t> token_of_row = {});
  // y += scale · B·(A·x) for the rows whose sequence's adapter (ForwardInput::seq_loras) adapts
  // w: each run of rows of one adapter as one low-rank matmul pair (Punica's grouping).
  void ApplyLora(const WeightMatrix& w, const float* x, int64_t n_rows, float* y,
                 std::span<const int32_t> token_of_row);
  // Several matrices over the same input (one parallel pass on the fast path).
  void MatmulOps(std::initializer_list<std::pair<const WeightMatrix*, float*>> outputs,
                 const float* x, int64_t n_tokens);
  void Tap(const char* name, int layer, std::vector<float>& data, int64_t rows,
           int64_t row_size);
  // The gated feed-forward both activations share: `activation` (gate, up, n_rows, row_size,
  // out) between the projections, shown as `activation_name`.
  void GatedFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                        const WeightMatrix& down, const char* activation_name,
                        const std::function<void(const float*, const float*, int64_t, int64_t,
                                                 float*)>& activation);
  // The gated feed-forward of the mixture of experts, `activation` between each expert's
  // projections (shown as `activation_name`, one row per (token, choice) pair in the order of
  // ExpertGroups::order, not llama.cpp's): MoeFeedForward's, and the gpt-oss family's.
  using Activation =
      std::function<void(const float*, const float*, int64_t, int64_t, float*)>;
  void ExpertsFeedForward(const MoeWeights& w, const char* activation_name,
                          const Activation& activation);
  // MatmulGroups, or each matrix by MatmulReference in KernelMode::kReference.
  void MatmulGroupsOp(std::span<const MatmulGroup> groups);
  // proj_ = proj · (GELU-tanh(gate · in) * the layer's PerLayerInputs row), `in` n_ rows of
  // n_embd: the per-layer embedding of gemma4 (in = x) and of gemma3n's AltUp.
  void PerLayerTerm(const float* in, const WeightMatrix& gate, const WeightMatrix& proj);
  // out = tanh(router · RmsNorm(in, router_norm) / n_embd), n_ rows of n_streams: AltUp's
  // modalities.
  void AltUpModalities(const AltUpWeights& w, const float* in, float* out);
  // Stream s of AltUp's streams (n_ rows of n_embd) in `streams`.
  float* Stream(std::vector<float>& streams, int64_t s) {
    return streams.data() + s * n_ * c_.n_embd;
  }
  // Several row ops share one parallel region only when no tap watches: a tap may
  // overwrite what it is shown, so each op must wait for the tap before it.
  bool fuse() const { return !tap_; }

  // The current layer's widths (ModelConfig::Shape).
  int q_dim() const { return shape_.q_dim(c_.n_heads); }
  int kv_dim() const { return shape_.kv_dim(); }

  const ModelConfig& c_;
  const std::vector<RopeParams> layer_rope_;  // each layer's (ModelConfig::rope_layers)
  CpuContext ctx_;
  KernelMode mode_;
  ActivationTap tap_;
  const ForwardInput* in_ = nullptr;
  const KvCacheView* kv_ = nullptr;
  std::span<float> logits_;
  std::vector<float> lora_in_, lora_mid_;  // ApplyLora's x and A·x
  std::vector<std::pair<const LoraPair*, int64_t>> lora_rows_;  // ApplyLora's rows by pair
  std::vector<std::pair<size_t, size_t>> lora_tasks_;  // [first, end) of lora_rows_ each
  int64_t n_ = 0;  // tokens of the step
  int layer_ = 0;
  ModelConfig::LayerShape shape_;  // layer_'s
  // The norm weight h already holds RmsNorm(x) with (AddResidual's fusion), or null.
  const float* h_norm_ = nullptr;
  std::vector<float> x_, h_, q_, k_, v_, attn_, proj_, gate_, up_, final_;
  // PerLayerInputs' rows (n_layers x width a token) and a layer's gate of them.
  std::vector<float> per_layer_, per_layer_gate_;
  std::vector<float> ones_;  // head_dim ones: RmsNorm without a weight
  // AltUp's streams and the layer's predictions of them (n_streams_ of n_ rows of n_embd),
  // its router's modalities and coefficients; LAuReL's output.
  int64_t n_streams_ = 0;
  std::vector<float> streams_, predictions_, modalities_, coefs_;
  std::vector<float> laurel_;
  // The mixture of experts' scratch: router logits (then probs), each (token, choice) pair's
  // expert, weight and row of the grouped activations, the shared expert's gate and output.
  std::vector<float> moe_logits_, moe_weights_, moe_x_, moe_gate_, moe_up_, moe_down_;
  std::vector<float> shared_gate_, shared_out_;
  // Multi-head latent attention's scratch: the query's LoRA, the query's heads as projected,
  // kv_a's output, the roped parts, and each head's inputs and outputs of k_b and v_b.
  std::vector<float> mla_q_a_, mla_q_, mla_kv_, mla_pe_, mla_in_, mla_out_;
  std::vector<int32_t> moe_experts_, moe_row_;
  ExpertGroups moe_groups_;
};

}  // namespace tokenmill
