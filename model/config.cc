#include "model/config.h"

#include <string>

#include "model/arch/family.h"

namespace tokenmill {

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
  if (file.Has(p + "rope.scaling.type")) {
    TM_ASSIGN_OR_RETURN(std::string_view scaling, file.GetString(p + "rope.scaling.type"));
    if (scaling == "linear") {
      TM_ASSIGN_OR_RETURN(float factor, file.GetF32(p + "rope.scaling.factor"));
      if (!(factor > 0.0f)) return InvalidArgumentError("rope.scaling.factor must be positive");
      c.rope_position_scale = 1.0f / factor;
    } else if (scaling != "none") {
      return UnimplementedError("RoPE scaling '" + std::string(scaling) +
                                "' is not supported (only none, linear and Llama 3 rope_freqs)");
    }
  }
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
