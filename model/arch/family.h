// A model family: the models one general.architecture names, and how such a model reads its
// hyper-parameters, loads each layer's tensors and composes its one forward graph from the
// shared blocks (model/arch/forward_blocks.h), whichever device runs them. Each family is a
// file of its own in this folder (llama.cc, qwen2.cc, ...), as in llama.cpp's src/models/;
// FindModelFamily lists them. What a family
// takes from llama.cpp's code rather than from the file's metadata (layer patterns, scales,
// defaults) its file sets, saying so.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/arch/forward_blocks.h"
#include "model/config.h"
#include "model/weights.h"

namespace tokenmill {

struct ModelFamily {
  std::string_view name;  // general.architecture
  // The family's own hyper-parameters, after the keys every family shares (LoadModelConfig);
  // refuses by name what the family cannot run.
  Status (*read_config)(const GgufFile& file, ModelConfig& config);
  // The tensors of layer `layer` (blk.<layer>.*), checked against the config; vectors not in
  // f32 are converted into `f32_copies` (LoadVector).
  StatusOr<LayerWeights> (*load_layer)(const GgufFile& file, const ModelConfig& config,
                                       int layer, F32Copies& f32_copies);
  // One step's graph, from the embedding to the logits.
  void (*forward)(const ModelConfig& config, const ModelWeights& weights, ForwardBlocks& blocks);
};

extern const ModelFamily kLlamaFamily;   // llama.cc: llama, and mistral or smollm GGUFs
extern const ModelFamily kQwen2Family;   // qwen2.cc
extern const ModelFamily kQwen3Family;   // qwen3.cc
extern const ModelFamily kGemmaFamily;   // gemma.cc
extern const ModelFamily kGemma2Family;  // gemma2.cc
extern const ModelFamily kGemma3Family;  // gemma3.cc
extern const ModelFamily kGemma3nFamily;  // gemma3n.cc
extern const ModelFamily kGemma4Family;   // gemma4.cc
extern const ModelFamily kPhi3Family;    // phi3.cc
extern const ModelFamily kQwen2MoeFamily;  // qwen2moe.cc
extern const ModelFamily kQwen3MoeFamily;  // qwen3moe.cc
extern const ModelFamily kGptOssFamily;    // gpt_oss.cc
extern const ModelFamily kMistral3Family;  // mistral3.cc
extern const ModelFamily kDeepseek2Family;  // deepseek2.cc
extern const ModelFamily kBertFamily;       // bert.cc: an encoder (embeddings only)
extern const ModelFamily kNomicBertFamily;  // bert.cc: an encoder with RoPE and SwiGLU

// The family of the file's general.architecture; an error naming it if tokenmill runs none.
StatusOr<const ModelFamily*> FindModelFamily(const GgufFile& file);

// For the family files and LoadModelConfig: an optional key's value, `fallback` when absent,
// an error when malformed.
StatusOr<uint32_t> U32Or(const GgufFile& file, const std::string& key, uint32_t fallback);
StatusOr<float> F32Or(const GgufFile& file, const std::string& key, float fallback);

// The tensors of llama's layer, which the other families' layers start from: attn_norm, Q, K,
// V, the attention output, ffn_norm and the gate, up and down projections (or the experts,
// LoadExperts).
StatusOr<LayerWeights> LoadLlamaLayer(const GgufFile& file, const ModelConfig& config, int layer,
                                      F32Copies& f32_copies);
// Q, K and V's biases (attn_{q,k,v}.bias).
Status LoadQkvBiases(const GgufFile& file, const ModelConfig& config, int layer,
                     F32Copies& f32_copies, LayerWeights& weights);

// The mixture-of-experts keys (ModelConfig::experts) as llama.cpp reads them:
// <arch>.expert_count (absent or 0: a dense model) and expert_used_count (at least 1, at most
// expert_count), each expert's width <arch>.expert_feed_forward_length (else
// feed_forward_length / expert_used_count, qwen's fallback) and, when `shared`, the shared
// expert's
// expert_shared_feed_forward_length (else feed_forward_length). Gating, renormalization and
// scale are the family's to set.
Status ReadExpertKeys(const GgufFile& file, ModelConfig& config, bool shared);
// A layer's mixture of experts (ModelConfig::experts): the router ffn_gate_inp, the experts'
// ffn_gate_exps and ffn_up_exps (or one merged ffn_gate_up_exps, gate rows first) and
// ffn_down_exps, and, when the config has a shared expert, ffn_{gate,up,down}_shexp with
// ffn_gate_inp_shexp. LoadLlamaLayer loads them instead of the dense ffn_{gate,up,down}
// when the model has experts.
Status LoadExperts(const GgufFile& file, const ModelConfig& config, int layer,
                   LayerWeights& weights);

// The attn_norm of the layer after `layer`, which the residual add before it may compute
// (ForwardBlocks::AddResidual's next_norm); empty after the last layer.
std::span<const float> NextAttnNorm(const ModelWeights& weights, int layer);

// A layer's per-head RMS norms of Q and K (attn_q_norm, attn_k_norm: head_dim each).
Status LoadHeadNorms(const GgufFile& file, const ModelConfig& config, int layer,
                     F32Copies& f32_copies, LayerWeights& weights);

// Each layer's RoPE (ModelConfig::rope_layers): `sliding` for the sliding-window layers, the
// model's base and scale for the others.
void SetSlidingLayerRope(ModelConfig& config, ModelConfig::LayerRope sliding);

// Gemma's post-norms of the attention's and the feed-forward's outputs
// (post_attention_norm, post_ffw_norm).
Status LoadPostNorms(const GgufFile& file, const ModelConfig& config, int layer,
                     F32Copies& f32_copies, LayerWeights& weights);

// Gemma 3n's and Gemma 4's attention inputs: Q, K and V, Q and K normed per head with their
// weights and V without, or Q alone (normed) in a layer that reads another layer's KV.
void NormedQkvOrQ(const ModelConfig& config, int layer, const LayerWeights& weights,
                  ForwardBlocks& blocks);

// Which layers slide, as llama.cpp's load_swa_pattern reads them: the key
// <arch>.attention.sliding_window_pattern as one bool per layer, or as a period n (layer i
// slides unless i % n == n - 1; 0: every layer), `default_period` when the key is absent.
Status ReadSlidingLayers(const GgufFile& file, ModelConfig& config, uint32_t default_period);

}  // namespace tokenmill
