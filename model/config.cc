#include "model/config.h"

#include <array>
#include <cmath>
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

// The RoPE scaling keys as llama.cpp reads them (llama_model::load_hparams, llama_context's
// YaRN set-up): a missing type means linear, a missing or zero factor means 1.
Status ReadRopeScaling(const GgufFile& file, const std::string& p, ModelConfig& c) {
  TM_ASSIGN_OR_RETURN(uint32_t original,
                      U32Or(file, p + "rope.scaling.original_context_length",
                            static_cast<uint32_t>(c.context_length)));
  c.rope_original_context = static_cast<int>(original);
  std::string_view scaling = "linear";
  if (file.Has(p + "rope.scaling.type")) {
    TM_ASSIGN_OR_RETURN(scaling, file.GetString(p + "rope.scaling.type"));
  }
  if (scaling != "none" && scaling != "linear" && scaling != "yarn" && scaling != "longrope") {
    return UnimplementedError("RoPE scaling '" + std::string(scaling) +
                              "' is not supported (none, linear, yarn, longrope and Llama 3 "
                              "rope_freqs are)");
  }
  TM_ASSIGN_OR_RETURN(float factor, F32Or(file, p + "rope.scaling.factor", 0.0f));
  if (factor < 0.0f || !std::isfinite(factor)) {
    return InvalidArgumentError("rope.scaling.factor must be positive");
  }
  c.rope_position_scale = factor == 0.0f || scaling == "none" ? 1.0f : 1.0f / factor;
  TM_ASSIGN_OR_RETURN(float attn_factor, F32Or(file, p + "rope.scaling.attn_factor", 1.0f));
  c.rope_attn_factor = 1.0f;
  if (scaling == "yarn") {
    // YaRN's magnitude 0.1 ln(s) + 1, which ggml's rope multiplies in again: llama.cpp
    // cancels that here, in float as it does.
    c.rope_ext_factor = 1.0f;
    const float s = 1.0f / c.rope_position_scale;
    const float mscale = s <= 1.0f ? 1.0f : 0.1f * std::log(s) + 1.0f;
    c.rope_attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(s)));
  }
  c.rope_attn_factor *= attn_factor;
  return OkStatus();
}

}  // namespace

RopeParams LayerRope(const ModelConfig& c, int layer, std::span<const float> freq_factors) {
  const bool own = layer < static_cast<int>(c.rope_layers.size());
  RopeParams p{.style = c.rope_style,
               .head_dim = c.head_dim,
               .n_rot = c.n_rot,
               .freq_base = own ? c.rope_layers[layer].freq_base : c.rope_freq_base,
               .position_scale = own ? c.rope_layers[layer].position_scale : c.rope_position_scale,
               .freq_factors = freq_factors,
               .ext_factor = c.rope_ext_factor,
               .attn_factor = c.rope_attn_factor};
  const std::array<float, 2> corr =
      YarnCorrectionDims(p.n_rot, c.rope_original_context, p.freq_base, c.rope_yarn_beta_fast,
                         c.rope_yarn_beta_slow);
  p.corr_low = corr[0];
  p.corr_high = corr[1];
  return p;
}

float AttentionTemperature(const ModelConfig& c, int32_t position) {
  // In llama.cpp's types: the position and the length as floats, floor in float, the rest in
  // double, stored as float.
  const float steps =
      std::floor(static_cast<float>(position) / static_cast<float>(c.attn_temp_length));
  return static_cast<float>(std::log(steps + 1.0) * c.attn_temp_scale + 1.0);
}

StatusOr<ModelConfig> LoadModelConfig(const GgufFile& file, const ModelFamily& family) {
  ModelConfig c;
  c.arch_name = std::string(family.name);
  const std::string p = c.arch_name + ".";
  TM_ASSIGN_OR_RETURN(uint32_t n_layers, file.GetU32(p + "block_count"));
  TM_ASSIGN_OR_RETURN(uint32_t n_embd, file.GetU32(p + "embedding_length"));
  TM_ASSIGN_OR_RETURN(uint32_t n_heads, file.GetU32(p + "attention.head_count"));
  TM_ASSIGN_OR_RETURN(uint32_t n_kv_heads, U32Or(file, p + "attention.head_count_kv", n_heads));
  TM_ASSIGN_OR_RETURN(uint32_t n_ff, file.GetU32(p + "feed_forward_length"));
  TM_ASSIGN_OR_RETURN(uint32_t context, U32Or(file, p + "context_length", 2048));
  TM_ASSIGN_OR_RETURN(c.rms_eps, file.GetF32(p + "attention.layer_norm_rms_epsilon"));
  TM_ASSIGN_OR_RETURN(c.rope_freq_base, F32Or(file, p + "rope.freq_base", 10000.0f));
  c.n_layers = static_cast<int>(n_layers);
  c.n_embd = static_cast<int>(n_embd);
  c.n_heads = static_cast<int>(n_heads);
  c.n_kv_heads = static_cast<int>(n_kv_heads);
  c.n_ff = static_cast<int>(n_ff);
  c.context_length = static_cast<int>(context);
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ff <= 0 ||
      c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgumentError("model metadata has impossible sizes: layers, embedding, heads " +
                                std::to_string(c.n_heads) + ", KV heads " +
                                std::to_string(c.n_kv_heads) + " (heads must be a multiple)");
  }
  TM_ASSIGN_OR_RETURN(uint32_t head_dim,
                      U32Or(file, p + "attention.key_length", n_embd / n_heads));
  TM_ASSIGN_OR_RETURN(uint32_t value_dim, U32Or(file, p + "attention.value_length", head_dim));
  if (value_dim != head_dim) {
    return UnimplementedError("attention.value_length differs from attention.key_length");
  }
  c.head_dim = static_cast<int>(head_dim);
  TM_ASSIGN_OR_RETURN(uint32_t n_rot, U32Or(file, p + "rope.dimension_count", head_dim));
  c.n_rot = static_cast<int>(n_rot);
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim) {
    return InvalidArgumentError("rope.dimension_count " + std::to_string(c.n_rot) +
                                " must be even and at most the head size " +
                                std::to_string(c.head_dim));
  }
  TM_RETURN_IF_ERROR(ReadRopeScaling(file, p, c));
  const GgufTensor* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->shape.size() != 2) {
    return InvalidArgumentError("the model has no 2-D tensor 'token_embd.weight'");
  }
  c.n_vocab = static_cast<int>(embd->shape[1]);
  c.tied_output = file.FindTensor("output.weight") == nullptr;
  TM_RETURN_IF_ERROR(family.read_config(file, c));
  return c;
}

}  // namespace tokenmill
