// The qwen3moe family: qwen3's layer (per-head Q/K norms, NeoX RoPE, no biases) with a
// mixture of experts for its feed-forward and no shared expert; llama.cpp gates it by softmax
// and renormalizes the chosen experts' weights (build_moe_ffn's norm_w, set in its code, not
// read from the file; expert_weights_scale is not read either).
#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadQwen3MoeConfig(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  TM_RETURN_IF_ERROR(ReadExpertKeys(file, c, /*shared=*/false));
  if (c.experts.n_expert == 0) {
    return InvalidArgumentError("a qwen3moe model needs qwen3moe.expert_count > 0");
  }
  c.experts.gating = ExpertGating::kSoftmax;
  c.experts.normalize = true;
  return OkStatus();
}

StatusOr<LayerWeights> LoadQwen3MoeLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                         F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  TM_RETURN_IF_ERROR(LoadHeadNorms(file, c, layer, copies, l));
  return l;
}

void Qwen3MoeForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.HeadNorms(l.q_norm, l.k_norm);
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

const ModelFamily kQwen3MoeFamily{"qwen3moe", ReadQwen3MoeConfig, LoadQwen3MoeLayer,
                                  Qwen3MoeForward};

}  // namespace tokenmill
