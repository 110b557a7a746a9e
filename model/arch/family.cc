#include "model/arch/family.h"

#include <iterator>
#include <string>
#include <variant>
#include <vector>

namespace tokenmill {
namespace {

constexpr const ModelFamily* kFamilies[] = {&kLlamaFamily,  &kQwen2Family,  &kQwen3Family,
                                            &kGemmaFamily,  &kGemma2Family, &kGemma3Family,
                                            &kPhi3Family};

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
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(file, p + "attn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, c.q_dim()));
  TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, c.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, c.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", c.q_dim(), c.n_embd));
  TM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(file, p + "ffn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.gate, LoadMatrix(file, p + "ffn_gate.weight", c.n_embd, c.n_ff));
  TM_ASSIGN_OR_RETURN(l.up, LoadMatrix(file, p + "ffn_up.weight", c.n_embd, c.n_ff));
  TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", c.n_ff, c.n_embd));
  return l;
}

Status LoadHeadNorms(const GgufFile& file, const ModelConfig& c, int layer, F32Copies& copies,
                     LayerWeights& l) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  TM_ASSIGN_OR_RETURN(l.q_norm, LoadVector(file, p + "attn_q_norm.weight", c.head_dim, copies));
  TM_ASSIGN_OR_RETURN(l.k_norm, LoadVector(file, p + "attn_k_norm.weight", c.head_dim, copies));
  return OkStatus();
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

}  // namespace tokenmill
