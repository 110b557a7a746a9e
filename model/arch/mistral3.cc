// The mistral3 family (Ministral 3 3B, 8B and 14B; llama.cpp's LLM_ARCH_MISTRAL3,
// src/models/mistral3.cpp): llama's layer (RoPE on adjacent pairs, SwiGLU), YaRN with the
// file's own beta_fast, beta_slow and yarn_log_multiplier, and Llama 4's attention
// temperature: after RoPE each query is multiplied by log(floor(p / n) + 1) * s + 1 for its
// position p, s = attention.temperature_scale and n the original context of YaRN
// (rope.scaling.original_context_length, else context_length). Q, K, V and attention-output
// biases are taken where the file has them, as llama.cpp takes them. From llama.cpp's code
// rather than the file: the RoPE style, Q·K scaled by 1 / √head_dim (attention.scale is not
// read), n from YaRN's context, and the YaRN magnitude that yarn_log_multiplier sets
// (llama_context: mscale(factor, 1) / mscale(factor, log_mul)). Refused by name: n_rot !=
// head_dim (llama.cpp asserts it), experts and feed-forward biases (llama.cpp runs them,
// tokenmill's mistral3 does not yet), a temperature without an original context.
#include <cmath>
#include <string>
#include <tuple>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

StatusOr<float> FiniteF32Or(const GgufFile& file, const std::string& key, float fallback) {
  TM_ASSIGN_OR_RETURN(float value, F32Or(file, key, fallback));
  if (!std::isfinite(value)) return InvalidArgumentError(key + " must be a finite number");
  return value;
}

// YaRN's cos/sin factor as llama_context computes it when the file sets a log multiplier
// (ModelConfig::rope_attn_factor otherwise, model/config.cc): mscale(s, 1) / mscale(s, m),
// the magnitude ggml multiplies in again cancelled, times rope.scaling.attn_factor.
Status ReadYarnLogMultiplier(const GgufFile& file, const std::string& p, ModelConfig& c) {
  TM_ASSIGN_OR_RETURN(float log_mul, FiniteF32Or(file, p + "rope.scaling.yarn_log_multiplier",
                                                 0.0f));
  if (log_mul == 0.0f || c.rope_ext_factor == 0.0f) return OkStatus();
  TM_ASSIGN_OR_RETURN(float attn_factor, F32Or(file, p + "rope.scaling.attn_factor", 1.0f));
  const float s = 1.0f / c.rope_position_scale;
  auto mscale = [s](float m) { return s <= 1.0f ? 1.0f : 0.1f * m * std::log(s) + 1.0f; };
  c.rope_attn_factor = mscale(1.0f) / mscale(log_mul);
  c.rope_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(s));
  c.rope_attn_factor *= attn_factor;
  return OkStatus();
}

Status ReadMistral3Config(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.rope_style = RopeStyle::kAdjacentPairs;
  if (c.n_rot != c.head_dim) {
    return UnimplementedError(p + "rope.dimension_count (" + std::to_string(c.n_rot) +
                              ") differs from the head size (" + std::to_string(c.head_dim) +
                              "): llama.cpp's mistral3 requires RoPE over whole heads");
  }
  TM_ASSIGN_OR_RETURN(uint32_t n_expert, U32Or(file, p + "expert_count", 0));
  if (n_expert > 0) {
    return UnimplementedError(p + "expert_count is " + std::to_string(n_expert) +
                              ": tokenmill runs dense mistral3 models only");
  }
  TM_ASSIGN_OR_RETURN(c.rope_yarn_beta_fast,
                      FiniteF32Or(file, p + "rope.scaling.yarn_beta_fast", 32.0f));
  TM_ASSIGN_OR_RETURN(c.rope_yarn_beta_slow,
                      FiniteF32Or(file, p + "rope.scaling.yarn_beta_slow", 1.0f));
  TM_RETURN_IF_ERROR(ReadYarnLogMultiplier(file, p, c));
  TM_ASSIGN_OR_RETURN(c.attn_temp_scale,
                      FiniteF32Or(file, p + "attention.temperature_scale", 0.0f));
  if (c.attn_temp_scale != 0.0f) {
    c.attn_temp_length = c.rope_original_context;
    if (c.attn_temp_length <= 0) {
      return InvalidArgumentError(
          p + "attention.temperature_scale needs a positive " + p +
          "rope.scaling.original_context_length (or context_length): its positions per step");
    }
  }
  return OkStatus();
}

StatusOr<LayerWeights> LoadMistral3Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                         F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  for (const char* name : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"}) {
    if (file.FindTensor(p + name) != nullptr) {
      return UnimplementedError("tensor '" + p + name +
                                "': tokenmill runs mistral3 feed-forwards without biases");
    }
  }
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  for (auto [name, size, bias] : {std::tuple{"attn_q.bias", c.q_dim(), &l.q_bias},
                                  std::tuple{"attn_k.bias", c.kv_dim(), &l.k_bias},
                                  std::tuple{"attn_v.bias", c.kv_dim(), &l.v_bias},
                                  std::tuple{"attn_output.bias", c.n_embd, &l.o_bias}}) {
    if (file.FindTensor(p + name) == nullptr) continue;
    TM_ASSIGN_OR_RETURN(*bias, LoadVector(file, p + name, size, copies));
  }
  return l;
}

void Mistral3Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.AddQkvBias(l.q_bias, l.k_bias, l.v_bias);
    b.Attention();  // the temperature: ModelConfig::attn_temp_scale
    b.AttentionOutput(l.o, l.o_bias);
    b.AddResidual("ffn_inp", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    b.SwiGluFeedForward(l.gate, l.up, l.down);
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kMistral3Family{"mistral3", ReadMistral3Config, LoadMistral3Layer,
                                  Mistral3Forward};

}  // namespace tokenmill
