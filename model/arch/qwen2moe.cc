// The qwen2moe family (Qwen1.5-MoE, Qwen2-57B-A14B): qwen2's layer (Q/K/V biases, NeoX RoPE)
// with a mixture of experts whose routed weights llama.cpp leaves unnormalized (softmax
// gating, build_moe_ffn's norm_w false; expert_weights_scale not read), plus a shared expert
// of expert_shared_feed_forward_length for every token, scaled by the sigmoid of its own gate
// (ffn_gate_inp_shexp).
#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadQwen2MoeConfig(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = true;
  TM_RETURN_IF_ERROR(ReadExpertKeys(file, c, /*shared=*/true));
  if (c.experts.n_expert == 0) {
    return InvalidArgumentError("a qwen2moe model needs qwen2moe.expert_count > 0");
  }
  c.experts.gating = ExpertGating::kSoftmax;
  c.experts.normalize = false;
  return OkStatus();
}

StatusOr<LayerWeights> LoadQwen2MoeLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                         F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  TM_RETURN_IF_ERROR(LoadQkvBiases(file, c, layer, copies, l));
  return l;
}

void Qwen2MoeForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.AddQkvBias(l.q_bias, l.k_bias, l.v_bias);
    b.Attention();
    b.AttentionOutput(l.o);
    b.AddResidual("ffn_inp", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    b.MoeFeedForward(l.moe);
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kQwen2MoeFamily{"qwen2moe", ReadQwen2MoeConfig, LoadQwen2MoeLayer,
                                  Qwen2MoeForward};

}  // namespace tokenmill
