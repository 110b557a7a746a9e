// Model hyper-parameters of a GGUF, read from its metadata: the keys every family shares
// here, each family's own in its file (model/arch/). Anything tokenmill cannot run is refused
// by name.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/elementwise.h"

namespace tokenmill {

struct ModelFamily;

// How a mixture-of-experts layer turns its router's logits into expert weights, as llama.cpp's
// llama_expert_gating_func_type: softmax or sigmoid over every expert's logit, before the top
// k are chosen; or (kSoftmaxSelected, gpt-oss) the top k logits chosen, then softmaxed.
enum class ExpertGating { kSoftmax, kSigmoid, kSoftmaxSelected };

// A mixture-of-experts feed-forward (llama.cpp's build_moe_ffn): n_expert experts of n_ff_exp
// each, n_used of them chosen per token by the router; their weights are renormalized to sum
// 1 when `normalize` and then multiplied by `scale` unless it is 0 or 1. A shared expert of
// n_ff_shexp (qwen2moe; deepseek2's shared experts as one) runs for every token; 0: none.
// With n_groups > 1 (DeepSeek-V3's group-limited routing) the experts form n_groups groups of
// consecutive experts and a token chooses only among the n_groups_used groups whose two best
// experts score highest.
struct ExpertConfig {
  int n_expert = 0;  // 0: a dense feed-forward
  int n_used = 0;
  int n_ff_exp = 0;
  int n_ff_shexp = 0;
  ExpertGating gating = ExpertGating::kSoftmax;
  bool normalize = false;
  float scale = 0.0f;
  int n_groups = 0;
  int n_groups_used = 0;
  // The shared expert's output is scaled by the sigmoid of its gate (ffn_gate_inp_shexp:
  // qwen2moe), or added as it is (deepseek2).
  bool shared_gated = true;
  // The first n_dense_leading layers have a dense feed-forward (deepseek2's
  // leading_dense_block_count).
  int n_dense_leading = 0;
};

// How an embedding pools a prompt's final hidden states (llama.cpp's pooling_type, in its
// order): kNone pools nothing (no embedding), kRank is a reranker's classification head.
enum class Pooling { kNone, kMean, kCls, kLast, kRank };
std::string_view PoolingName(Pooling pooling);
// The pooling a name (PoolingName's, or "rank") says; nullopt for another name.
std::optional<Pooling> PoolingFromName(std::string_view name);

struct ModelConfig {
  std::string arch_name;  // as in general.architecture: the family's name
  int n_layers = 0;
  int n_embd = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // < n_heads: grouped-query attention (1: multi-query)
  int head_dim = 0;
  int n_ff = 0;
  // Each head's V width (attention.value_length): head_dim, but for multi-head latent
  // attention (mla), whose V is the latent.
  int v_head_dim = 0;
  int n_vocab = 0;
  int context_length = 0;
  float rms_eps = 1e-5f;  // the norms' epsilon: RMSNorm's, or an encoder's LayerNorm's
  // RoPE: rotated dimensions, base, pairing and linear position scaling (1 / factor, for
  // linear and YaRN scaling); Llama 3's frequency factors and LongRoPE's short or long ones
  // come as tensors (ModelWeights::rope_freqs).
  int n_rot = 0;
  float rope_freq_base = 10000.0f;
  float rope_position_scale = 1.0f;
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  // The context RoPE was trained at before scaling (rope.scaling.original_context_length,
  // else context_length): YaRN's correction range; LongRoPE takes its long factors when the
  // configured context (ModelOptions::context) exceeds it.
  int rope_original_context = 0;
  float rope_ext_factor = 0.0f;  // YaRN: 1 (llama.cpp's yarn_ext_factor), else 0
  // YaRN's ramp runs from the pair that turns beta_fast times over rope_original_context to
  // the one that turns beta_slow times: llama.cpp's defaults, unless the family reads
  // rope.scaling.yarn_beta_fast / _slow (mistral3).
  float rope_yarn_beta_fast = 32.0f;
  float rope_yarn_beta_slow = 1.0f;
  // cos and sin are scaled by this (llama.cpp's yarn_attn_factor: rope.scaling.attn_factor,
  // LongRoPE's attention scaling, times YaRN's own when ext_factor is set).
  float rope_attn_factor = 1.0f;
  // A layer's own RoPE base and linear scale (gemma2's and gemma3's sliding-window layers),
  // set by its family; a layer past the end of rope_layers uses rope_freq_base and
  // rope_position_scale. freq_factors false: the layer ignores the model's rope_freqs
  // (gemma4's sliding layers; its full ones take them).
  struct LayerRope {
    float freq_base;
    float position_scale;
    bool freq_factors = true;
  };
  std::vector<LayerRope> rope_layers;
  bool qkv_bias = false;      // Q/K/V projections with biases (qwen2)
  bool tied_output = false;   // no output.weight: logits use token_embd.weight
  // Sliding-window attention (gemma2, gemma3): a layer whose sliding_layers entry is set
  // attends only to the sliding_window most recent positions, its own included (llama.cpp's
  // LLAMA_SWA_TYPE_STANDARD); its KV older than that is never read. Empty: every layer
  // attends to its whole sequence.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;
  // > 0: soft-capping, x = cap · tanh(x / cap), of the attention scores (gemma2) and of the
  // logits (gemma2, and gemma3 files that set it).
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // n_expert > 0: every layer's feed-forward is a mixture of experts (but the leading dense
  // ones).
  ExpertConfig experts;
  // Per-layer embeddings' width (gemma4's embedding_length_per_layer_input): each layer gets
  // an input of its own per token (ModelWeights::per_layer); 0: none.
  int n_embd_per_layer = 0;
  // An encoder (bert): attention sees the whole sequence, both ways, and there is no output
  // norm or head, so the model computes embeddings only (its hidden states as they are).
  bool encoder = false;
  // <arch>.pooling_type: how an embedding of this model pools (kNone when the file says
  // nothing, as for every chat model).
  Pooling pooling = Pooling::kNone;
  // Rank pooling's outputs go through a softmax (llama.cpp's qwen3 rerankers).
  bool rank_softmax = false;
  // AltUp's residual streams (gemma3n: ModelWeights::altup_proj); 0: none.
  int altup_streams = 0;
  // Llama 4's attention temperature (mistral3's attention.temperature_scale): after RoPE, the
  // query of the token at position p is multiplied by AttentionTemperature(p); 0: none.
  float attn_temp_scale = 0.0f;
  int attn_temp_length = 0;  // positions per step of the temperature (> 0 when it is set)

  // Multi-head latent attention (deepseek2, as llama.cpp runs it absorbed): K and V of every
  // head come from one latent of kv_lora_rank a token, and the cache holds only that latent
  // (normed) and the token's roped key of n_rot, one row of head_dim = kv_lora_rank + n_rot
  // (n_kv_heads 1); V is the row's latent part (KvCacheView::v_in_k, v_head_dim
  // kv_lora_rank). Each head's query, qk_nope values and n_rot roped ones, reaches the latent
  // space through attn_k_b; its attention output leaves it through attn_v_b, v_head wide.
  // kv_lora_rank 0: none.
  struct LatentAttention {
    int q_lora_rank = 0;  // the query's LoRA rank (attn_q_a, attn_q_b); 0: a plain attn_q
    int kv_lora_rank = 0;
    int qk_nope = 0;
    int v_head = 0;
    float score_scale = 0.0f;  // of q·k: YaRN's mscale² / √(qk_nope + n_rot)
    // The file's K and V matrices are one attn_kv_b (older files), split at load.
    bool kv_b_fused = false;
  };
  LatentAttention mla;
  bool HasLatentKv() const { return mla.kv_lora_rank > 0; }
  bool HasExperts(int layer) const {
    return experts.n_expert > 0 && layer >= experts.n_dense_leading;
  }

  // What a layer's attention and feed-forward are made of where layers differ (gemma4's
  // sliding and full layers in head size, KV heads and rotated dimensions; per-layer
  // feed_forward_length or head_count_kv arrays): one entry per layer, or empty when every
  // layer has head_dim, n_kv_heads, n_rot and n_ff. Those are then the largest of any layer.
  struct LayerShape {
    int head_dim = 0;
    int n_kv_heads = 0;
    int n_rot = 0;
    int n_ff = 0;
    int q_dim(int n_heads) const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
  };
  std::vector<LayerShape> layer_shapes;
  // Cross-layer KV sharing (gemma3n, gemma4): kv_source_layers[l] is the layer whose K/V
  // layer l attends over, l itself when it stores its own. A layer that reads an earlier
  // one's computes no K or V, stores nothing and owns no KV blocks; the source is of the
  // same kind (sliding or not) and stores. Empty: every layer stores.
  std::vector<int> kv_source_layers;

  LayerShape Shape(int layer) const {
    return layer >= 0 && layer < static_cast<int>(layer_shapes.size())
               ? layer_shapes[static_cast<size_t>(layer)]
               : LayerShape{head_dim, n_kv_heads, n_rot, n_ff};
  }
  int KvSourceLayer(int layer) const {
    return layer >= 0 && layer < static_cast<int>(kv_source_layers.size())
               ? kv_source_layers[static_cast<size_t>(layer)]
               : layer;
  }
  bool StoresKv(int layer) const { return KvSourceLayer(layer) == layer; }

  bool IsSlidingLayer(int layer) const {
    return sliding_window > 0 && layer < static_cast<int>(sliding_layers.size()) &&
           sliding_layers[layer];
  }

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// Checks what a family set per layer: layer_shapes and kv_source_layers of n_layers entries
// when set, positive sizes no larger than the model's, and each KV source an earlier storing
// layer of the same kind whose KV heads and head size the reader has.
Status CheckLayerShapes(const ModelConfig& c);

// Layer `layer`'s RoPE: the model's, or the base and scale its family gave the layer, over the
// layer's head size and rotated dimensions, with YaRN's correction range for that base;
// `freq_factors` as ModelWeights::rope_freqs (dropped for a layer whose LayerRope says so).
RopeParams LayerRope(const ModelConfig& c, int layer, std::span<const float> freq_factors);

// The factor attn_temp_scale multiplies the query of position `position` by, as llama.cpp's
// llm_graph_input_attn_temp: log(floor(p / attn_temp_length) + 1) * attn_temp_scale + 1,
// the log in double as there.
float AttentionTemperature(const ModelConfig& c, int32_t position);

// The shared keys, then the family's (ModelFamily::read_config).
StatusOr<ModelConfig> LoadModelConfig(const GgufFile& file, const ModelFamily& family);

}  // namespace tokenmill
