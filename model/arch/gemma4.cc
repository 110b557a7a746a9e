// The gemma4 family's dense text models (Gemma 4 E2B, E4B, 31B): gemma3's pre- and post-norms,
// per-head Q and K norms and GELU feed-forward, with sliding-window and full layers of their
// own head sizes and rotated dimensions (attention.key_length_swa, rope.dimension_count_swa),
// full layers' proportional RoPE through rope_freqs, V RMS-normed without a weight, q·k
// unscaled, per-layer embeddings (embedding_length_per_layer_input), a learned scale of each
// layer's output and, with attention.shared_kv_layers = N, the last N layers storing no KV:
// with K = n_layers - N, a sliding one reads layer K - 2's and a full one layer K - 1's. From
// llama.cpp's code rather than the file (src/models/gemma4.cpp, llama-model.cpp's reuse
// callback): that sharing rule, the attention scale of 1, the sliding layers' RoPE base of
// 10 000 unless rope.freq_base_swa and their scale of 1, and a missing attn_v meaning V = K.
// Mixtures of experts (26B-A4B) are refused by name.
#include <cmath>
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadGemma4Config(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.rope_style = RopeStyle::kNeox;
  TM_ASSIGN_OR_RETURN(uint32_t n_expert, U32Or(file, p + "expert_count", 0));
  if (n_expert > 0) {
    return UnimplementedError("gemma4 with a mixture of experts (" + p +
                              "expert_count) is not supported: its dense models are");
  }
  TM_ASSIGN_OR_RETURN(uint32_t window, file.GetU32(p + "attention.sliding_window"));
  if (window == 0) return InvalidArgumentError(p + "attention.sliding_window must be positive");
  c.sliding_window = static_cast<int>(window);
  if (!file.Has(p + "attention.sliding_window_pattern")) {
    return InvalidArgumentError("gemma4 needs " + p + "attention.sliding_window_pattern");
  }
  TM_RETURN_IF_ERROR(ReadSlidingLayers(file, c, 0));

  // Sliding layers' head size and rotated dimensions; the full layers' are the model's.
  TM_ASSIGN_OR_RETURN(uint32_t head_swa, file.GetU32(p + "attention.key_length_swa"));
  TM_ASSIGN_OR_RETURN(uint32_t value_swa, U32Or(file, p + "attention.value_length_swa", head_swa));
  TM_ASSIGN_OR_RETURN(uint32_t rot_swa,
                      U32Or(file, p + "rope.dimension_count_swa", static_cast<uint32_t>(c.n_rot)));
  if (value_swa != head_swa || head_swa == 0 || static_cast<int>(head_swa) > c.head_dim ||
      rot_swa % 2 != 0 || rot_swa > head_swa) {
    return UnimplementedError(
        p + "attention.key_length_swa " + std::to_string(head_swa) + " (value " +
        std::to_string(value_swa) + ", rotated " + std::to_string(rot_swa) +
        "): tokenmill runs sliding layers whose K and V heads match, no larger than the full "
        "layers' " + std::to_string(c.head_dim) + ", with an even number of rotated dimensions "
        "within the head");
  }
  TM_ASSIGN_OR_RETURN(float base_swa, F32Or(file, p + "rope.freq_base_swa", 10000.0f));
  std::vector<ModelConfig::LayerShape> shapes;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    ModelConfig::LayerShape shape = c.Shape(layer);
    if (c.IsSlidingLayer(layer)) {
      shape.head_dim = static_cast<int>(head_swa);
      shape.n_rot = static_cast<int>(rot_swa);
    }
    shapes.push_back(shape);
  }
  c.layer_shapes = std::move(shapes);
  SetSlidingLayerRope(c, {base_swa, 1.0f, /*freq_factors=*/false});

  TM_ASSIGN_OR_RETURN(uint32_t shared, U32Or(file, p + "attention.shared_kv_layers", 0));
  if (shared > 0) {
    const int first = c.n_layers - static_cast<int>(shared);  // the first that stores nothing
    if (first < 2) {
      return InvalidArgumentError(p + "attention.shared_kv_layers " + std::to_string(shared) +
                                  " leaves fewer than 2 of " + std::to_string(c.n_layers) +
                                  " layers storing KV");
    }
    for (int layer = 0; layer < c.n_layers; ++layer) {
      c.kv_source_layers.push_back(layer < first ? layer
                                                 : first - (c.IsSlidingLayer(layer) ? 2 : 1));
    }
  }
  TM_ASSIGN_OR_RETURN(uint32_t per_layer, file.GetU32(p + "embedding_length_per_layer_input"));
  c.n_embd_per_layer = static_cast<int>(per_layer);
  TM_ASSIGN_OR_RETURN(c.final_softcap, F32Or(file, p + "final_logit_softcapping", 0.0f));
  return OkStatus();
}

StatusOr<LayerWeights> LoadGemma4Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                       F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const ModelConfig::LayerShape shape = c.Shape(layer);
  const int q_dim = shape.q_dim(c.n_heads);
  if (file.FindTensor(p + "attn_qkv.weight") != nullptr) {
    return UnimplementedError("tensor '" + p + "attn_qkv.weight': a fused QKV projection in "
                              "gemma4 is not supported");
  }
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(file, p + "attn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, q_dim));
  TM_ASSIGN_OR_RETURN(l.q_norm,
                      LoadVector(file, p + "attn_q_norm.weight", shape.head_dim, copies));
  if (c.StoresKv(layer)) {
    TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, shape.kv_dim()));
    l.v = l.k;  // no attn_v: V = K (llama.cpp's)
    if (file.FindTensor(p + "attn_v.weight") != nullptr) {
      TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, shape.kv_dim()));
    }
    TM_ASSIGN_OR_RETURN(l.k_norm,
                        LoadVector(file, p + "attn_k_norm.weight", shape.head_dim, copies));
  }
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", q_dim, c.n_embd));
  TM_RETURN_IF_ERROR(LoadPostNorms(file, c, layer, copies, l));
  TM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(file, p + "ffn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.gate, LoadMatrix(file, p + "ffn_gate.weight", c.n_embd, shape.n_ff));
  TM_ASSIGN_OR_RETURN(l.up, LoadMatrix(file, p + "ffn_up.weight", c.n_embd, shape.n_ff));
  TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", shape.n_ff, c.n_embd));
  if (file.FindTensor(p + "layer_output_scale.weight") != nullptr) {
    TM_ASSIGN_OR_RETURN(l.out_scale, LoadVector(file, p + "layer_output_scale.weight", 1, copies));
  }
  if (c.n_embd_per_layer > 0) {
    TM_ASSIGN_OR_RETURN(l.per_layer_gate,
                        LoadMatrix(file, p + "inp_gate.weight", c.n_embd, c.n_embd_per_layer));
    TM_ASSIGN_OR_RETURN(l.per_layer_proj,
                        LoadMatrix(file, p + "proj.weight", c.n_embd_per_layer, c.n_embd));
    TM_ASSIGN_OR_RETURN(l.per_layer_post_norm,
                        LoadVector(file, p + "post_norm.weight", c.n_embd, copies));
  }
  return l;
}

void Gemma4Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd, std::sqrt(static_cast<float>(c.n_embd)));
  if (w.per_layer.width > 0) b.PerLayerInputs(w.per_layer);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    NormedQkvOrQ(c, layer, l, b);
    b.Attention({.factor = 1.0f});
    b.AttentionOutput(l.o);
    b.PostNorm(l.attn_post_norm, "attn_post_norm");
    b.AddResidual("attn_out", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    b.GeluFeedForward(l.gate, l.up, l.down);
    b.PostNorm(l.ffn_post_norm, "ffn_post_norm");
    const bool more = w.per_layer.width > 0 || !l.out_scale.empty();
    b.AddResidual("ffn_residual", more ? std::span<const float>() : NextAttnNorm(w, layer));
    if (w.per_layer.width > 0) {
      b.PerLayerEmbedding(l.per_layer_gate, l.per_layer_proj);
      b.PostNorm(l.per_layer_post_norm, "per_layer_embd_out");
      b.AddResidual("pe_out", l.out_scale.empty() ? NextAttnNorm(w, layer)
                                                  : std::span<const float>());
    }
    if (!l.out_scale.empty()) b.ScaleResidual(l.out_scale);
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kGemma4Family{"gemma4", ReadGemma4Config, LoadGemma4Layer, Gemma4Forward};

}  // namespace tokenmill
