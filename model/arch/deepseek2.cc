// The deepseek2 family (DeepSeek-V2/V2-Lite, V3, R1, Kimi K2 and other models of the
// architecture), as llama.cpp's src/models/deepseek2.cpp runs it:
//  - multi-head latent attention, absorbed (ModelConfig::mla, ForwardBlocks::LatentAttention):
//    the cache holds one row a token and layer, the normed latent and the roped key. Files of
//    the older layout, with attn_kv_b whole (no key_length_mla), are split into k_b and v_b
//    at load and run the same way, where llama.cpp decompresses them into full heads;
//  - RoPE on adjacent pairs of the roped part, YaRN with the converter's yarn_log_multiplier
//    (0.1 x mscale_all_dim, which llama.cpp divides back) in the score scale;
//  - leading dense layers, then a mixture of experts with shared experts added as they are,
//    softmax or sigmoid gating (softmax when the file says nothing), the selection bias
//    exp_probs_b, group-limited routing, weight normalization and the routed scale.
#include <cmath>
#include <string>

#include "kernels/dequantize.h"
#include "model/arch/family.h"

namespace tokenmill {
namespace {

// A size from the file, within what any model has, so that products of sizes cannot overflow.
Status CheckSize(const std::string& key, int64_t value, int64_t min) {
  constexpr int64_t kLargest = 1 << 20;
  if (value < min || value > kLargest) {
    return InvalidArgumentError(key + " is " + std::to_string(value) + ": it must be between " +
                                std::to_string(min) + " and " + std::to_string(kLargest));
  }
  return OkStatus();
}

// llama.cpp's llama_expert_gating_func_type, as the key holds it.
StatusOr<ExpertGating> ReadGating(const GgufFile& file, const ModelConfig& c) {
  const std::string key = "deepseek2.expert_gating_func";
  TM_ASSIGN_OR_RETURN(uint32_t gating, U32Or(file, key, 0));
  switch (gating) {
    case 0: {
      // Absent: softmax, as the V2 and V2.5 converters meant, but GLM 4.7 Lite's sigmoid
      // (llama.cpp tells it by its layers and vocabulary).
      const bool glm = (c.n_layers == 47 || c.n_layers == 48) && c.n_vocab == 154880;
      return glm ? ExpertGating::kSigmoid : ExpertGating::kSoftmax;
    }
    case 1: return ExpertGating::kSoftmax;
    case 2: return ExpertGating::kSigmoid;
    default:
      return UnimplementedError(key + " " + std::to_string(gating) +
                                " is not supported: softmax (1) and sigmoid (2) are");
  }
}

Status ReadExperts(const GgufFile& file, ModelConfig& c) {
  const std::string p = "deepseek2.";
  TM_RETURN_IF_ERROR(ReadExpertKeys(file, c, /*shared=*/false));
  ExpertConfig& e = c.experts;
  TM_ASSIGN_OR_RETURN(uint32_t dense, U32Or(file, p + "leading_dense_block_count", 0));
  e.n_dense_leading = static_cast<int>(std::min<uint32_t>(dense, c.n_layers));
  if (e.n_expert == 0) {
    if (e.n_dense_leading < c.n_layers) {
      return InvalidArgumentError("a deepseek2 model needs " + p + "expert_count > 0 (layers " +
                                  std::to_string(e.n_dense_leading) + " on are experts)");
    }
    return OkStatus();
  }
  TM_ASSIGN_OR_RETURN(uint32_t shared, file.GetU32(p + "expert_shared_count"));
  TM_RETURN_IF_ERROR(CheckSize(p + "expert_shared_count", shared, 0));
  e.n_ff_shexp = static_cast<int>(shared) * e.n_ff_exp;
  e.shared_gated = false;
  TM_ASSIGN_OR_RETURN(e.scale, F32Or(file, p + "expert_weights_scale", 0.0f));
  if (!std::isfinite(e.scale)) {
    return InvalidArgumentError(p + "expert_weights_scale must be a finite number");
  }
  e.normalize = false;
  if (file.Has(p + "expert_weights_norm")) {
    TM_ASSIGN_OR_RETURN(e.normalize, file.GetBool(p + "expert_weights_norm"));
  }
  TM_ASSIGN_OR_RETURN(e.gating, ReadGating(file, c));
  TM_ASSIGN_OR_RETURN(uint32_t groups, U32Or(file, p + "expert_group_count", 0));
  TM_ASSIGN_OR_RETURN(uint32_t groups_used, U32Or(file, p + "expert_group_used_count", 0));
  if (groups > 1 && (groups >= static_cast<uint32_t>(e.n_expert) || e.n_expert % groups != 0 ||
                     groups_used == 0 || groups_used >= groups ||
                     static_cast<int>(groups_used * (e.n_expert / groups)) < e.n_used)) {
    return InvalidArgumentError(
        p + "expert_group_count " + std::to_string(groups) + " and expert_group_used_count " +
        std::to_string(groups_used) + " do not fit " + std::to_string(e.n_expert) +
        " experts of which " + std::to_string(e.n_used) +
        " are used: the groups must divide the experts, and fewer groups than all must hold "
        "the used experts");
  }
  if (groups > 1) {
    e.n_groups = static_cast<int>(groups);
    e.n_groups_used = static_cast<int>(groups_used);
  }
  return OkStatus();
}

// YaRN as llama.cpp sets it up for deepseek2 (llama_context, [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]):
// with yarn_log_multiplier set, cos and sin keep their magnitude (the attention factor cancels
// YaRN's), and the score scale takes mscale² instead.
Status ReadYarn(const GgufFile& file, ModelConfig& c, float head_k) {
  const std::string p = "deepseek2.";
  TM_ASSIGN_OR_RETURN(float log_mul, F32Or(file, p + "rope.scaling.yarn_log_multiplier", 0.0f));
  log_mul /= 0.1f;
  TM_ASSIGN_OR_RETURN(float attn_factor, F32Or(file, p + "rope.scaling.attn_factor", 1.0f));
  if (!std::isfinite(log_mul) || !std::isfinite(attn_factor)) {
    return InvalidArgumentError(p + "rope.scaling.yarn_log_multiplier and attn_factor must be "
                                "finite numbers");
  }
  const float factor = 1.0f / c.rope_position_scale;
  if (c.rope_ext_factor != 0.0f && log_mul != 0.0f) {
    // get_mscale(factor, m) / get_mscale(factor, m) is 1 whichever m llama.cpp takes.
    c.rope_attn_factor = 1.0f * (1.0f / (1.0f + 0.1f * std::log(factor))) * attn_factor;
  }
  const float attn_factor_org = c.rope_attn_factor * (1.0f + 0.1f * std::log(factor));
  const float mscale = attn_factor_org * (1.0f + 0.1f * log_mul * std::log(factor));
  c.mla.score_scale = 1.0f * mscale * mscale / std::sqrt(head_k);
  return OkStatus();
}

Status ReadDeepseek2Config(const GgufFile& file, ModelConfig& c) {
  const std::string p = "deepseek2.";
  for (const char* key : {"nextn_predict_layers", "attention.temperature_scale"}) {
    if (file.Has(p + key)) {
      return UnimplementedError(p + key + " is not supported in deepseek2 models (multi-token "
                                "prediction layers and attention temperature)");
    }
  }
  c.rope_style = RopeStyle::kAdjacentPairs;
  ModelConfig::LatentAttention& m = c.mla;
  TM_ASSIGN_OR_RETURN(uint32_t q_lora, U32Or(file, p + "attention.q_lora_rank", 0));
  TM_ASSIGN_OR_RETURN(uint32_t kv_lora, file.GetU32(p + "attention.kv_lora_rank"));
  TM_ASSIGN_OR_RETURN(uint32_t k_mla, U32Or(file, p + "attention.key_length_mla", 0));
  TM_ASSIGN_OR_RETURN(uint32_t v_mla, U32Or(file, p + "attention.value_length_mla", 0));
  TM_RETURN_IF_ERROR(CheckSize(p + "attention.q_lora_rank", q_lora, 0));
  TM_RETURN_IF_ERROR(CheckSize(p + "attention.kv_lora_rank", kv_lora, 1));
  // The absorbed layout (key_length_mla and value_length_mla set: llama.cpp's is_mla) states
  // the MQA over the latent in key_length and value_length, the older one the heads'.
  m.kv_b_fused = k_mla == 0 || v_mla == 0;
  const int head_k = m.kv_b_fused ? c.head_dim : static_cast<int>(k_mla);
  const int head_v = m.kv_b_fused ? c.v_head_dim : static_cast<int>(v_mla);
  const std::string heads_keys = m.kv_b_fused ? "" : "_mla";
  TM_RETURN_IF_ERROR(CheckSize(p + "attention.key_length" + heads_keys, head_k, 2));
  TM_RETURN_IF_ERROR(CheckSize(p + "attention.value_length" + heads_keys, head_v, 1));
  if (c.n_rot <= 0 || c.n_rot >= head_k) {
    return InvalidArgumentError(p + "rope.dimension_count " + std::to_string(c.n_rot) +
                                " must be positive and less than the key's head size " +
                                std::to_string(head_k));
  }
  const int latent_row = static_cast<int>(kv_lora) + c.n_rot;
  if (!m.kv_b_fused &&
      (c.head_dim != latent_row || c.v_head_dim != static_cast<int>(kv_lora) ||
       c.n_kv_heads != 1)) {
    return InvalidArgumentError(
        p + "attention.key_length " + std::to_string(c.head_dim) + ", value_length " +
        std::to_string(c.v_head_dim) + " and head_count_kv " + std::to_string(c.n_kv_heads) +
        " must be the latent's: kv_lora_rank + rope.dimension_count (" +
        std::to_string(latent_row) + "), kv_lora_rank and 1");
  }
  m.q_lora_rank = static_cast<int>(q_lora);
  m.kv_lora_rank = static_cast<int>(kv_lora);
  m.qk_nope = head_k - c.n_rot;
  m.v_head = head_v;
  // The cache's one row a token: every layer is multi-query over it.
  c.head_dim = latent_row;
  c.v_head_dim = m.kv_lora_rank;
  c.n_kv_heads = 1;
  for (ModelConfig::LayerShape& shape : c.layer_shapes) {
    shape.head_dim = latent_row;
    shape.n_kv_heads = 1;
  }
  TM_RETURN_IF_ERROR(ReadYarn(file, c, static_cast<float>(head_k)));
  return ReadExperts(file, c);
}

// k_b of each head from the older attn_kv_b (per head qk_nope K rows then v_head V rows, each
// of kv_lora_rank): the K rows transposed, in f32 (F32Copies), as the newer files store them.
std::vector<WeightMatrix> TransposedKeys(const WeightMatrix& kv_b, const ModelConfig& c,
                                         F32Copies& copies) {
  const ModelConfig::LatentAttention& m = c.mla;
  std::vector<WeightMatrix> k_b;
  std::vector<float> row(static_cast<size_t>(m.kv_lora_rank));
  for (int h = 0; h < c.n_heads; ++h) {
    std::vector<float>& t = copies.emplace_back(static_cast<size_t>(m.kv_lora_rank) * m.qk_nope);
    for (int i = 0; i < m.qk_nope; ++i) {
      const int64_t r = int64_t{h} * (m.qk_nope + m.v_head) + i;
      DequantizeReference(kv_b.type, kv_b.data + r * kv_b.row_bytes, row);
      for (int j = 0; j < m.kv_lora_rank; ++j) t[static_cast<size_t>(j) * m.qk_nope + i] = row[j];
    }
    k_b.push_back(WeightMatrix{.type = TensorType::kF32,
                               .data = reinterpret_cast<const uint8_t*>(t.data()),
                               .rows = m.kv_lora_rank,
                               .cols = m.qk_nope,
                               .row_bytes = int64_t{m.qk_nope} * 4});
  }
  return k_b;
}

StatusOr<LatentAttentionWeights> LoadLatentAttention(const GgufFile& file, const ModelConfig& c,
                                                     const std::string& p, F32Copies& copies) {
  const ModelConfig::LatentAttention& m = c.mla;
  const int64_t q_rows = int64_t{c.n_heads} * (m.qk_nope + c.n_rot);
  LatentAttentionWeights a;
  if (m.q_lora_rank > 0) {
    TM_ASSIGN_OR_RETURN(a.q_a, LoadMatrix(file, p + "attn_q_a.weight", c.n_embd, m.q_lora_rank));
    TM_ASSIGN_OR_RETURN(a.q_a_norm,
                        LoadVector(file, p + "attn_q_a_norm.weight", m.q_lora_rank, copies));
    TM_ASSIGN_OR_RETURN(a.q_b, LoadMatrix(file, p + "attn_q_b.weight", m.q_lora_rank, q_rows));
  } else {
    TM_ASSIGN_OR_RETURN(a.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, q_rows));
  }
  TM_ASSIGN_OR_RETURN(a.kv_a, LoadMatrix(file, p + "attn_kv_a_mqa.weight", c.n_embd,
                                         m.kv_lora_rank + c.n_rot));
  TM_ASSIGN_OR_RETURN(a.kv_a_norm,
                      LoadVector(file, p + "attn_kv_a_norm.weight", m.kv_lora_rank, copies));
  if (!m.kv_b_fused) {
    TM_ASSIGN_OR_RETURN(a.k_b, LoadExpertMatrices(file, p + "attn_k_b.weight", m.qk_nope,
                                                  m.kv_lora_rank, c.n_heads));
    TM_ASSIGN_OR_RETURN(a.v_b, LoadExpertMatrices(file, p + "attn_v_b.weight", m.kv_lora_rank,
                                                  m.v_head, c.n_heads));
    return a;
  }
  TM_ASSIGN_OR_RETURN(WeightMatrix kv_b,
                      LoadMatrix(file, p + "attn_kv_b.weight", m.kv_lora_rank,
                                 int64_t{c.n_heads} * (m.qk_nope + m.v_head)));
  a.k_b = TransposedKeys(kv_b, c, copies);
  for (int h = 0; h < c.n_heads; ++h) {
    a.v_b.push_back(RowsOf(kv_b, int64_t{h} * (m.qk_nope + m.v_head) + m.qk_nope, m.v_head));
  }
  return a;
}

StatusOr<LayerWeights> LoadDeepseek2Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                          F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(file, p + "attn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.mla, LoadLatentAttention(file, c, p, copies));
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight",
                                      int64_t{c.n_heads} * c.mla.v_head, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(file, p + "ffn_norm.weight", c.n_embd, copies));
  if (!c.HasExperts(layer)) {
    TM_ASSIGN_OR_RETURN(l.gate, LoadMatrix(file, p + "ffn_gate.weight", c.n_embd, c.n_ff));
    TM_ASSIGN_OR_RETURN(l.up, LoadMatrix(file, p + "ffn_up.weight", c.n_embd, c.n_ff));
    TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", c.n_ff, c.n_embd));
    return l;
  }
  TM_RETURN_IF_ERROR(LoadExperts(file, c, layer, l));
  if (file.FindTensor(p + "exp_probs_b.bias") != nullptr) {
    TM_ASSIGN_OR_RETURN(l.moe.selection_bias,
                        LoadVector(file, p + "exp_probs_b.bias", c.experts.n_expert, copies));
  }
  return l;
}

void Deepseek2Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.LatentAttention(l.mla);
    b.AttentionOutput(l.o);
    b.AddResidual("ffn_inp", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    if (c.HasExperts(layer)) {
      b.MoeFeedForward(l.moe);
    } else {
      b.SwiGluFeedForward(l.gate, l.up, l.down);
    }
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kDeepseek2Family{"deepseek2", ReadDeepseek2Config, LoadDeepseek2Layer,
                                   Deepseek2Forward};

}  // namespace tokenmill
