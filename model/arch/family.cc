#include "model/arch/family.h"

#include <iterator>
#include <string>
#include <variant>
#include <vector>

namespace tokenmill {
namespace {

constexpr const ModelFamily* kFamilies[] = {
    &kLlamaFamily,    &kQwen2Family,    &kQwen3Family,    &kGemmaFamily,   &kGemma2Family,
    &kGemma3Family,   &kGemma3nFamily,  &kGemma4Family,   &kPhi3Family,    &kQwen2MoeFamily,
    &kQwen3MoeFamily, &kGptOssFamily,   &kMistral3Family, &kDeepseek2Family, &kBertFamily,
    &kNomicBertFamily};

// "'llama' and 'qwen2'": the names of the families, for the refusal.
std::string FamilyNames() {
  std::string names;
  constexpr size_t kCount = std::size(kFamilies);
  for (size_t i = 0; i < kCount; ++i) {
    if (i > 0) names += i + 1 < kCount ? ", " : " and ";
    names.append("'").append(kFamilies[i]->name).append("'");
  }
  return names;
}

}  // namespace

StatusOr<const ModelFamily*> FindModelFamily(const GgufFile& file) {
  TM_ASSIGN_OR_RETURN(std::string_view arch, file.GetString("general.architecture"));
  for (const ModelFamily* family : kFamilies) {
    if (family->name == arch) return family;
  }
  return UnimplementedError("architecture '" + std::string(arch) +
                            "' is not supported; tokenmill runs " + FamilyNames() + " models");
}

StatusOr<uint32_t> U32Or(const GgufFile& file, const std::string& key, uint32_t fallback) {
  if (!file.Has(key)) return fallback;
  return file.GetU32(key);
}

StatusOr<float> F32Or(const GgufFile& file, const std::string& key, float fallback) {
  if (!file.Has(key)) return fallback;
  return file.GetF32(key);
}

StatusOr<LayerWeights> LoadLlamaLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                      F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const ModelConfig::LayerShape shape = c.Shape(layer);
  const int q_dim = shape.q_dim(c.n_heads);
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(file, p + "attn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, q_dim));
  TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, shape.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, shape.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", q_dim, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(file, p + "ffn_norm.weight", c.n_embd, copies));
  if (c.experts.n_expert > 0) {
    TM_RETURN_IF_ERROR(LoadExperts(file, c, layer, l));
    return l;
  }
  TM_ASSIGN_OR_RETURN(l.gate, LoadMatrix(file, p + "ffn_gate.weight", c.n_embd, shape.n_ff));
  TM_ASSIGN_OR_RETURN(l.up, LoadMatrix(file, p + "ffn_up.weight", c.n_embd, shape.n_ff));
  TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", shape.n_ff, c.n_embd));
  return l;
}

Status LoadQkvBiases(const GgufFile& file, const ModelConfig& c, int layer, F32Copies& copies,
                     LayerWeights& l) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const ModelConfig::LayerShape shape = c.Shape(layer);
  TM_ASSIGN_OR_RETURN(l.q_bias,
                      LoadVector(file, p + "attn_q.bias", shape.q_dim(c.n_heads), copies));
  TM_ASSIGN_OR_RETURN(l.k_bias, LoadVector(file, p + "attn_k.bias", shape.kv_dim(), copies));
  TM_ASSIGN_OR_RETURN(l.v_bias, LoadVector(file, p + "attn_v.bias", shape.kv_dim(), copies));
  return OkStatus();
}

Status ReadExpertKeys(const GgufFile& file, ModelConfig& c, bool shared) {
  const std::string p = c.arch_name + ".";
  TM_ASSIGN_OR_RETURN(uint32_t n_expert, U32Or(file, p + "expert_count", 0));
  TM_ASSIGN_OR_RETURN(uint32_t n_used, U32Or(file, p + "expert_used_count", 0));
  if (n_expert == 0) return OkStatus();
  if (n_used == 0 || n_used > n_expert) {
    return InvalidArgumentError(p + "expert_used_count is " + std::to_string(n_used) +
                                ": it must be between 1 and " + p + "expert_count (" +
                                std::to_string(n_expert) + ")");
  }
  TM_ASSIGN_OR_RETURN(uint32_t n_ff_exp,
                      U32Or(file, p + "expert_feed_forward_length",
                            static_cast<uint32_t>(c.n_ff) / n_used));
  TM_ASSIGN_OR_RETURN(uint32_t n_ff_shexp,
                      U32Or(file, p + "expert_shared_feed_forward_length",
                            static_cast<uint32_t>(c.n_ff)));
  if (n_ff_exp == 0) {
    return InvalidArgumentError(p + "expert_feed_forward_length must be positive");
  }
  c.experts.n_expert = static_cast<int>(n_expert);
  c.experts.n_used = static_cast<int>(n_used);
  c.experts.n_ff_exp = static_cast<int>(n_ff_exp);
  c.experts.n_ff_shexp = shared ? static_cast<int>(n_ff_shexp) : 0;
  return OkStatus();
}

Status LoadExperts(const GgufFile& file, const ModelConfig& c, int layer, LayerWeights& l) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const ExpertConfig& e = c.experts;
  MoeWeights& m = l.moe;
  TM_ASSIGN_OR_RETURN(m.router, LoadMatrix(file, p + "ffn_gate_inp.weight", c.n_embd,
                                           e.n_expert));
  const std::string merged = p + "ffn_gate_up_exps.weight";
  if (file.FindTensor(merged) != nullptr) {
    TM_ASSIGN_OR_RETURN(std::vector<WeightMatrix> gate_up,
                        LoadExpertMatrices(file, merged, c.n_embd, 2 * e.n_ff_exp, e.n_expert));
    for (const WeightMatrix& w : gate_up) {
      m.gate.push_back(RowsOf(w, 0, e.n_ff_exp));
      m.up.push_back(RowsOf(w, e.n_ff_exp, e.n_ff_exp));
    }
  } else {
    TM_ASSIGN_OR_RETURN(m.gate, LoadExpertMatrices(file, p + "ffn_gate_exps.weight", c.n_embd,
                                                   e.n_ff_exp, e.n_expert));
    TM_ASSIGN_OR_RETURN(m.up, LoadExpertMatrices(file, p + "ffn_up_exps.weight", c.n_embd,
                                                 e.n_ff_exp, e.n_expert));
  }
  TM_ASSIGN_OR_RETURN(m.down, LoadExpertMatrices(file, p + "ffn_down_exps.weight", e.n_ff_exp,
                                                 c.n_embd, e.n_expert));
  if (e.n_ff_shexp == 0) return OkStatus();
  TM_ASSIGN_OR_RETURN(m.shared_gate, LoadMatrix(file, p + "ffn_gate_shexp.weight", c.n_embd,
                                                e.n_ff_shexp));
  TM_ASSIGN_OR_RETURN(m.shared_up, LoadMatrix(file, p + "ffn_up_shexp.weight", c.n_embd,
                                              e.n_ff_shexp));
  TM_ASSIGN_OR_RETURN(m.shared_down, LoadMatrix(file, p + "ffn_down_shexp.weight",
                                                e.n_ff_shexp, c.n_embd));
  if (!e.shared_gated) return OkStatus();
  TM_ASSIGN_OR_RETURN(m.shared_gate_inp,
                      LoadRowVector(file, p + "ffn_gate_inp_shexp.weight", c.n_embd));
  return OkStatus();
}

Status LoadHeadNorms(const GgufFile& file, const ModelConfig& c, int layer, F32Copies& copies,
                     LayerWeights& l) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int head_dim = c.Shape(layer).head_dim;
  TM_ASSIGN_OR_RETURN(l.q_norm, LoadVector(file, p + "attn_q_norm.weight", head_dim, copies));
  TM_ASSIGN_OR_RETURN(l.k_norm, LoadVector(file, p + "attn_k_norm.weight", head_dim, copies));
  return OkStatus();
}

void SetSlidingLayerRope(ModelConfig& c, ModelConfig::LayerRope sliding) {
  c.rope_layers.clear();
  for (int layer = 0; layer < c.n_layers; ++layer) {
    c.rope_layers.push_back(c.IsSlidingLayer(layer)
                                ? sliding
                                : ModelConfig::LayerRope{c.rope_freq_base, c.rope_position_scale});
  }
}

Status LoadPostNorms(const GgufFile& file, const ModelConfig& c, int layer, F32Copies& copies,
                     LayerWeights& l) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  TM_ASSIGN_OR_RETURN(l.attn_post_norm,
                      LoadVector(file, p + "post_attention_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.ffn_post_norm,
                      LoadVector(file, p + "post_ffw_norm.weight", c.n_embd, copies));
  return OkStatus();
}

void NormedQkvOrQ(const ModelConfig& c, int layer, const LayerWeights& l, ForwardBlocks& b) {
  if (c.StoresKv(layer)) {
    b.ProjectQkv(l.q, l.k, l.v);
    b.HeadNorms(l.q_norm, l.k_norm);
    b.ValueNorm();
  } else {
    b.ProjectQ(l.q);
    b.HeadNorms(l.q_norm, {});
  }
}

Status ReadSlidingLayers(const GgufFile& file, ModelConfig& c, uint32_t default_period) {
  const std::string key = c.arch_name + ".attention.sliding_window_pattern";
  c.sliding_layers.assign(static_cast<size_t>(c.n_layers), false);
  const GgufValue* value = file.Find(key);
  if (value != nullptr && value->type() == GgufValueType::kArray) {
    const std::vector<GgufValue>& items = value->items();
    if (value->element_type() != GgufValueType::kBool ||
        items.size() != static_cast<size_t>(c.n_layers)) {
      return InvalidArgumentError(key + " must be a period or one bool per layer (" +
                                  std::to_string(c.n_layers) + ")");
    }
    for (size_t i = 0; i < items.size(); ++i) {
      c.sliding_layers[i] = std::get<bool>(items[i].scalar());
    }
    return OkStatus();
  }
  TM_ASSIGN_OR_RETURN(uint32_t period, U32Or(file, key, default_period));
  for (uint32_t i = 0; i < static_cast<uint32_t>(c.n_layers); ++i) {
    c.sliding_layers[i] = period == 0 || i % period < period - 1;
  }
  return OkStatus();
}

std::span<const float> NextAttnNorm(const ModelWeights& weights, int layer) {
  const size_t next = static_cast<size_t>(layer) + 1;
  return next < weights.layers.size() ? weights.layers[next].attn_norm : std::span<const float>();
}

}  // namespace tokenmill
