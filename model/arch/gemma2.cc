// The gemma2 family: Gemma's layer (gemma.cc) with RMS post-norms of the attention's and the
// feed-forward's outputs, soft-capped attention scores and logits, and sliding-window
// attention on alternate layers. From llama.cpp's code rather than the file
// (src/models/gemma2.cpp): the window of 4096 and the period of 2 (even layers slide) when the
// file names none, the caps' defaults 50 and 30, the sliding layers' RoPE (the global one
// unless rope.freq_base_swa), Q scaled by 1 / √head_dim, or 1 / √(n_embd / n_head) for the 27B
// (46 layers), and the tied output.
#include <cmath>
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadGemma2Config(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.rope_style = RopeStyle::kNeox;
  c.tied_output = true;
  TM_ASSIGN_OR_RETURN(uint32_t window, U32Or(file, p + "attention.sliding_window", 4096));
  c.sliding_window = static_cast<int>(window);
  TM_RETURN_IF_ERROR(ReadSlidingLayers(file, c, 2));
  TM_ASSIGN_OR_RETURN(float base_swa, F32Or(file, p + "rope.freq_base_swa", c.rope_freq_base));
  SetSlidingLayerRope(c, {base_swa, c.rope_position_scale});
  TM_ASSIGN_OR_RETURN(c.attn_softcap, F32Or(file, p + "attn_logit_softcapping", 50.0f));
  TM_ASSIGN_OR_RETURN(c.final_softcap, F32Or(file, p + "final_logit_softcapping", 30.0f));
  if (!(c.attn_softcap > 0.0f) || !(c.final_softcap > 0.0f)) {
    return InvalidArgumentError(p + "attn_logit_softcapping and final_logit_softcapping must "
                                "be positive");
  }
  return OkStatus();
}

StatusOr<LayerWeights> LoadGemma2Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                        F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  TM_RETURN_IF_ERROR(LoadPostNorms(file, c, layer, copies, l));
  return l;
}

float Gemma2QueryScale(const ModelConfig& c) {
  const int dim = c.n_layers == 46 ? c.n_embd / c.n_heads : c.head_dim;
  return 1.0f / std::sqrt(static_cast<float>(dim));
}

void Gemma2Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  const float query_scale = Gemma2QueryScale(c);
  b.Embed(w.token_embd, std::sqrt(static_cast<float>(c.n_embd)));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.Attention({.factor = query_scale});
    b.AttentionOutput(l.o);
    b.PostNorm(l.attn_post_norm, "attn_post_norm");
    b.AddResidual("sa_out", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    b.GeluFeedForward(l.gate, l.up, l.down);
    b.PostNorm(l.ffn_post_norm, "ffn_post_norm");
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kGemma2Family{"gemma2", ReadGemma2Config, LoadGemma2Layer, Gemma2Forward};

}  // namespace tokenmill
