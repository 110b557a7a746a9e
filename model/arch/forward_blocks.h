// The building blocks a model family composes its one forward graph from (as llama.cpp's
// models compose build_norm, build_attn and build_ffn), whatever device runs them: the
// embedding lookup, norms, the Q/K/V projections, attention over the paged KV cache,
// feed-forward networks, residual adds and the logits. A family's file (model/arch/*.cc) says
// which blocks a layer has and in what order; an implementation owns the kernels, the scratch
// and the fusions: CpuForwardBlocks (cpu_blocks.h) on the CPU, CudaForwardBlocks
// (model/cuda/cuda_blocks.h) on a GPU, which refuses by name a block it has no kernel for.
// One virtual call per block per layer; the per-token loops are each implementation's own.
//
// Activations: the residual stream x, a norm's output h (the input of the next projections),
// q/k/v, the attention output, a block's output before its residual add, the feed-forward's
// gate and up. `name` arguments are the activation's name in llama.cpp's graph (for taps).
#pragma once

#include <span>

#include "model/config.h"
#include "model/weights.h"

namespace tokenmill {

// How attention scales q·k (ForwardBlocks::Attention).
struct QueryScale {
  // 0: q·k times 1 / sqrt(head_dim). > 0: q times `factor` after RoPE (one rounding) and q·k
  // times 1, as the graphs that ggml_scale Qcur before build_attn (Gemma's, phi3's).
  float factor = 0.0f;
  // `factor` is 1 / sqrt(head_dim), so a device may scale q·k by it instead (one rounding
  // less: the CUDA blocks do for phi3, as the CUDA pass always has). The CPU rounds q.
  bool may_scale_scores = false;
};

class ForwardBlocks {
 public:
  virtual ~ForwardBlocks() = default;

  // The layer the next blocks belong to: the taps name it, Attention reads its KV.
  virtual void BeginLayer(int layer) = 0;
  // x = the rows of token_embd for the step's tokens, times `scale` (Gemma's √n_embd) unless 1.
  virtual void Embed(const WeightMatrix& token_embd, float scale = 1.0f) = 0;
  // h = RmsNorm(x) with `weight`.
  virtual void Norm(std::span<const float> weight, const char* name) = 0;
  // An encoder's inputs (bert): x += the token-type row, then + each token's row of
  // position_embd at its position where the model has learned positions (not nomic-bert's).
  virtual void AddEncoderInputs(const EncoderInputs& inputs) = 0;
  // x = LayerNorm(x) (mean and variance, as ggml_norm) times `weight` plus `bias`, and h = x:
  // an encoder's post-norms, whose output is both the residual and the next block's input.
  virtual void LayerNorm(std::span<const float> weight, std::span<const float> bias,
                         const char* name) = 0;
  // The inputs of every layer's PerLayerEmbedding for the step's tokens, from x (after Embed)
  // as llama.cpp's gemma4 forms them: each token's row of w.token_embd times √width, plus
  // RmsNorm(w.model_proj · x / √n_embd) with proj_norm (each layer's width apart), over √2.
  virtual void PerLayerInputs(const PerLayerEmbeddings& w) = 0;
  // q, k, v = h times each matrix (the layer's shape: ModelConfig::Shape).
  virtual void ProjectQkv(const WeightMatrix& wq, const WeightMatrix& wk,
                          const WeightMatrix& wv) = 0;
  // q = h times wq alone: a layer that reads an earlier layer's KV
  // (ModelConfig::kv_source_layers) projects no K or V.
  virtual void ProjectQ(const WeightMatrix& wq) = 0;
  // Each of q, k and v plus its bias, where that bias is not empty.
  virtual void AddQkvBias(std::span<const float> q_bias, std::span<const float> k_bias,
                          std::span<const float> v_bias) = 0;
  // Each head of q and of k RMS-normed with its weight (head_dim), before RoPE; k untouched
  // when k_norm is empty (a layer reading another's KV).
  virtual void HeadNorms(std::span<const float> q_norm, std::span<const float> k_norm) = 0;
  // Each head of v RMS-normed with no weight (gemma4).
  virtual void ValueNorm() = 0;
  // RoPE on q and k (the layer's own, ModelConfig::rope_layers), k and v stored in this
  // layer's KV slots, then attention of each token over its sequence's KV (its window in a
  // sliding-window layer, scores soft-capped by attn_softcap): the attention output. A layer
  // that reads another's KV ropes and stores nothing of its own but q. q·k is
  // scaled as `scale` says; then, when the config sets attn_temp_scale (mistral3), each
  // token's q is multiplied by its AttentionTemperature. `sinks`: the layer's attention-sink
  // logits, one per query head (gpt-oss), or none.
  virtual void Attention(QueryScale scale = {}, std::span<const float> sinks = {}) = 0;
  // Multi-head latent attention (ModelConfig::mla: deepseek2) from h to the attention output
  // (n_heads x v_head a token), absorbed as llama.cpp runs it: each head's query (qk_nope
  // values, then n_rot roped ones) from h through the query's LoRA or its plain matrix;
  // kv_a · h split into the latent, RMS-normed with kv_a_norm, and the roped key, which are
  // stored as the token's one K row (V is its latent part); each head's qk_nope part taken into
  // the latent space through its k_b; multi-query attention over the K rows, q·k scaled by
  // mla.score_scale; each head's output, the latent part, through its v_b.
  virtual void LatentAttention(const LatentAttentionWeights& w) = 0;
  // Block output = attention output times wo, plus `bias` unless empty (gpt-oss).
  virtual void AttentionOutput(const WeightMatrix& wo, std::span<const float> bias = {}) = 0;
  // Block output = RmsNorm(block output) with `weight` (Gemma's post-norms).
  virtual void PostNorm(std::span<const float> weight, const char* name) = 0;
  // Block output = down(SiLU(gate(h)) * up(h)).
  virtual void SwiGluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                                 const WeightMatrix& down) = 0;
  // Block output = down(GELU-tanh(gate(h)) * up(h)) as llama.cpp computes it (GeluTanhGlu).
  virtual void GeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                               const WeightMatrix& down) = 0;
  // Block output = down(GELU-tanh(up(h) + up_bias)) + down_bias, no gate (bert's
  // feed-forward, llama.cpp's LLM_FFN_GELU with LLM_FFN_SEQ); empty biases are skipped.
  virtual void GeluMlp(const WeightMatrix& up, std::span<const float> up_bias,
                       const WeightMatrix& down, std::span<const float> down_bias) = 0;
  // Block output = the mixture of experts of h (ModelConfig::experts, model/arch/moe.h): the
  // router's logits routed per token (RouteToken, with MoeWeights::selection_bias), each
  // routed expert's SwiGLU over its tokens, each token's expert outputs times their weights
  // summed in the order of its choices; with a shared expert, its SwiGLU added, times the
  // sigmoid of shared_gate_inp · h where the model gates it (ExpertConfig::shared_gated).
  virtual void MoeFeedForward(const MoeWeights& w) = 0;
  // The same mixture with gpt-oss's clamped SwiGLU between each expert's projections
  // (ggml_swiglu_oai, alpha 1.702 and limit 7) and MoeWeights' biases where llama.cpp's
  // ggml_add_id adds them.
  virtual void OaiMoeFeedForward(const MoeWeights& w) = 0;
  // Block output = proj · (GELU-tanh(gate · x) * this layer's PerLayerInputs row): the
  // per-layer embedding (gemma4), before its PostNorm.
  virtual void PerLayerEmbedding(const WeightMatrix& gate, const WeightMatrix& proj) = 0;
  // Block output = down(GELU-tanh(sparse(gate(h))) * up(h)): GeluFeedForward with gemma3n's
  // activation sparsity, each token's gate row g become relu(g - (mean + std_multiplier ·
  // std)), std over n - 1, as llama.cpp's gaussian_topk.
  virtual void SparseGeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                                     const WeightMatrix& down, float std_multiplier) = 0;
  // AltUp (gemma3n), as llama.cpp's with its active stream 0. AltUpStreams: the streams from x
  // (after Embed): x itself, then each of `proj` · x rescaled to x's magnitude (√Σx²).
  virtual void AltUpStreams(std::span<const WeightMatrix> proj) = 0;
  // The layer's predicted streams, P_j = X_j + Σ_k c[j·n + k] X_k with c = predict_coef ·
  // tanh(router · RmsNorm(X_0, router_norm) / n_embd); x = P_0, which the layer computes on.
  virtual void AltUpPredict(const AltUpWeights& w) = 0;
  // The layer's corrected streams from x (its output): C_j = (x - P_0) · (correct_coef · m +
  // 1)_j + P_j, m the router's output over x; then X_0 = C_0 and X_j = C_j + q for the
  // others, q = RmsNorm(per_layer_proj · (GELU-tanh(per_layer_gate · (C_0 * correct_scale)) *
  // the layer's PerLayerInputs row)) with per_layer_post_norm.
  virtual void AltUpCorrect(const AltUpWeights& w, const WeightMatrix& per_layer_gate,
                            const WeightMatrix& per_layer_proj,
                            std::span<const float> per_layer_post_norm) = 0;
  // x = the streams merged: X_0 plus each other stream times `unembd`, rescaled to X_0's
  // magnitude, in order, over their count.
  virtual void AltUpMerge(std::span<const WeightMatrix> unembd) = 0;
  // LAuReL (gemma3n): keeps post_norm(right · left · h) + h for AddLaurel.
  virtual void Laurel(const LaurelWeights& w) = 0;
  // x = (x + the kept LAuReL output) · 1/√2.
  virtual void AddLaurel() = 0;
  // x += block output. `next_norm`: the weight of the Norm the graph takes next (empty if
  // none), which an implementation may compute here, fused, so that Norm finds it done.
  virtual void AddResidual(const char* name, std::span<const float> next_norm) = 0;
  // x *= scale[0] (gemma4's layer_output_scale).
  virtual void ScaleResidual(std::span<const float> scale) = 0;
  // The final norm of x's logit rows, then the logits: those rows times output, soft-capped
  // by final_softcap if set. The hidden rows (ForwardInput::hidden_rows) normed the same way
  // go to hidden_out (the CUDA pass norms them on the host after the step). An encoder has no
  // norm (output_norm empty: its hidden rows are x's) and no head (no logit rows).
  virtual void Logits(std::span<const float> output_norm, const WeightMatrix& output) = 0;
};

}  // namespace tokenmill
