#include "model/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/arch/family.h"
#include "model/forward_input.h"

namespace tokenmill {
namespace {

// More layers than any model has (the largest have about 130): a bound on what the metadata
// makes us allocate per layer before the tensors are checked.
constexpr uint32_t kMaxLayers = 4096;

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

// A per-layer size as llama.cpp's get_key_or_arr reads it: one value for every layer, or an
// array of one per layer (head_count_kv, feed_forward_length); `fallback` when absent, an
// error when required and absent. Each value must be positive.
StatusOr<std::vector<int>> PerLayerOr(const GgufFile& file, const std::string& key,
                                      uint32_t n_layers, std::optional<uint32_t> fallback) {
  const GgufValue* value = file.Find(key);
  std::vector<int> values;
  if (value != nullptr && value->type() == GgufValueType::kArray) {
    TM_ASSIGN_OR_RETURN(std::vector<int32_t> items, file.GetI32Array(key));
    if (items.size() != n_layers) {
      return InvalidArgumentError(key + " has " + std::to_string(items.size()) +
                                  " values: it must be one, or one per layer (" +
                                  std::to_string(n_layers) + ")");
    }
    values.assign(items.begin(), items.end());
  } else {
    uint32_t one = 0;
    if (value == nullptr && fallback) {
      one = *fallback;
    } else {
      TM_ASSIGN_OR_RETURN(one, file.GetU32(key));
    }
    values.assign(n_layers, static_cast<int>(std::min<uint32_t>(one, 1u << 30)));
  }
  for (int v : values) {
    if (v <= 0) return InvalidArgumentError(key + " must be positive");
  }
  return values;
}

}  // namespace

std::string_view PoolingName(Pooling pooling) {
  switch (pooling) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
    case Pooling::kRank: return "rank";
  }
  return "?";
}

std::optional<Pooling> PoolingFromName(std::string_view name) {
  for (const Pooling pooling :
       {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast, Pooling::kRank}) {
    if (PoolingName(pooling) == name) return pooling;
  }
  return std::nullopt;
}

RopeParams LayerRope(const ModelConfig& c, int layer, std::span<const float> freq_factors) {
  const bool own = layer < static_cast<int>(c.rope_layers.size());
  const ModelConfig::LayerShape shape = c.Shape(layer);
  RopeParams p{.style = c.rope_style,
               .head_dim = shape.head_dim,
               .n_rot = shape.n_rot,
               .freq_base = own ? c.rope_layers[layer].freq_base : c.rope_freq_base,
               .position_scale = own ? c.rope_layers[layer].position_scale : c.rope_position_scale,
               .freq_factors = own && !c.rope_layers[layer].freq_factors
                                   ? std::span<const float>()
                                   : freq_factors,
               .ext_factor = c.rope_ext_factor,
               .attn_factor = c.rope_attn_factor};
  const std::array<float, 2> corr =
      YarnCorrectionDims(p.n_rot, c.rope_original_context, p.freq_base, c.rope_yarn_beta_fast,
                         c.rope_yarn_beta_slow);
  p.corr_low = corr[0];
  p.corr_high = corr[1];
  return p;
}

Status CheckLayerShapes(const ModelConfig& c) {
  const auto sized = [&](size_t n, const char* what) -> Status {
    if (n != 0 && n != static_cast<size_t>(c.n_layers)) {
      return InvalidArgumentError(std::string(what) + " has " + std::to_string(n) +
                                  " entries for " + std::to_string(c.n_layers) + " layers");
    }
    return OkStatus();
  };
  TM_RETURN_IF_ERROR(sized(c.layer_shapes.size(), "the per-layer shape"));
  TM_RETURN_IF_ERROR(sized(c.kv_source_layers.size(), "the KV sharing"));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const ModelConfig::LayerShape s = c.Shape(layer);
    const std::string where = "layer " + std::to_string(layer);
    if (s.head_dim <= 0 || s.head_dim > c.head_dim || s.n_kv_heads <= 0 ||
        s.n_kv_heads > c.n_kv_heads || c.n_heads % s.n_kv_heads != 0 || s.n_ff <= 0 ||
        s.n_ff > c.n_ff || s.n_rot < 0 || s.n_rot % 2 != 0 || s.n_rot > s.head_dim) {
      return InvalidArgumentError(
          where + " has impossible sizes: head size " + std::to_string(s.head_dim) + ", " +
          std::to_string(s.n_kv_heads) + " KV heads (of " + std::to_string(c.n_heads) +
          " heads), " + std::to_string(s.n_rot) + " rotated dimensions, feed-forward " +
          std::to_string(s.n_ff));
    }
    const int source = c.KvSourceLayer(layer);
    if (source == layer) continue;
    if (source < 0 || source > layer || !c.StoresKv(source) ||
        c.IsSlidingLayer(source) != c.IsSlidingLayer(layer) ||
        c.Shape(source).head_dim != s.head_dim || c.Shape(source).n_kv_heads != s.n_kv_heads) {
      return InvalidArgumentError(where + " reads the KV of layer " + std::to_string(source) +
                                  ", which must be an earlier layer of the same kind and "
                                  "shape that stores its own");
    }
  }
  return OkStatus();
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
  if (n_layers == 0 || n_layers > kMaxLayers) {
    return InvalidArgumentError(p + "block_count is " + std::to_string(n_layers) +
                                ": a model has 1 to " + std::to_string(kMaxLayers) + " layers");
  }
  TM_ASSIGN_OR_RETURN(uint32_t n_embd, file.GetU32(p + "embedding_length"));
  TM_ASSIGN_OR_RETURN(uint32_t n_heads, file.GetU32(p + "attention.head_count"));
  TM_ASSIGN_OR_RETURN(const std::vector<int> kv_heads,
                      PerLayerOr(file, p + "attention.head_count_kv", n_layers, n_heads));
  TM_ASSIGN_OR_RETURN(const std::vector<int> ffs,
                      PerLayerOr(file, p + "feed_forward_length", n_layers, std::nullopt));
  // The largest of each (ModelConfig::layer_shapes holds every layer's where they differ).
  const uint32_t n_kv_heads = static_cast<uint32_t>(std::ranges::max(kv_heads));
  const uint32_t n_ff = static_cast<uint32_t>(std::ranges::max(ffs));
  TM_ASSIGN_OR_RETURN(uint32_t context, U32Or(file, p + "context_length", 2048));
  // RMSNorm's epsilon, or LayerNorm's where the model has that (bert).
  const std::string eps_key = file.Has(p + "attention.layer_norm_rms_epsilon")
                                  ? p + "attention.layer_norm_rms_epsilon"
                                  : p + "attention.layer_norm_epsilon";
  TM_ASSIGN_OR_RETURN(c.rms_eps, file.GetF32(eps_key));
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
  c.head_dim = static_cast<int>(head_dim);
  c.v_head_dim = static_cast<int>(std::min<uint32_t>(value_dim, 1u << 30));
  TM_ASSIGN_OR_RETURN(uint32_t n_rot, U32Or(file, p + "rope.dimension_count", head_dim));
  c.n_rot = static_cast<int>(n_rot);
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim) {
    return InvalidArgumentError("rope.dimension_count " + std::to_string(c.n_rot) +
                                " must be even and at most the head size " +
                                std::to_string(c.head_dim));
  }
  if (std::adjacent_find(kv_heads.begin(), kv_heads.end(), std::not_equal_to<>()) !=
          kv_heads.end() ||
      std::adjacent_find(ffs.begin(), ffs.end(), std::not_equal_to<>()) != ffs.end()) {
    for (int layer = 0; layer < c.n_layers; ++layer) {
      c.layer_shapes.push_back({c.head_dim, kv_heads[static_cast<size_t>(layer)], c.n_rot,
                                ffs[static_cast<size_t>(layer)]});
    }
  }
  TM_RETURN_IF_ERROR(ReadRopeScaling(file, p, c));
  const GgufTensor* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->shape.size() != 2) {
    return InvalidArgumentError("the model has no 2-D tensor 'token_embd.weight'");
  }
  c.n_vocab = static_cast<int>(embd->shape[1]);
  c.tied_output = file.FindTensor("output.weight") == nullptr;
  TM_ASSIGN_OR_RETURN(uint32_t pooling, U32Or(file, p + "pooling_type", 0));
  if (pooling > static_cast<uint32_t>(Pooling::kRank)) {
    return InvalidArgumentError("pooling_type " + std::to_string(pooling) +
                                " is none of llama.cpp's (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
  }
  c.pooling = static_cast<Pooling>(pooling);
  TM_RETURN_IF_ERROR(family.read_config(file, c));
  if (c.v_head_dim != (c.HasLatentKv() ? c.mla.kv_lora_rank : c.head_dim)) {
    return UnimplementedError("attention.value_length differs from attention.key_length");
  }
  TM_RETURN_IF_ERROR(CheckLayerShapes(c));
  TM_RETURN_IF_ERROR(CheckKvGroupShapes(c));
  return c;
}

}  // namespace tokenmill
