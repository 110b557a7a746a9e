// The gemma3 family: gemma2's layer (pre- and post-norms, GELU-tanh feed-forward, embeddings
// scaled by √n_embd) with an RMS norm on each head of Q and K before RoPE, no attention
// soft-cap, and 5 sliding-window layers to 1 global one. From llama.cpp's code rather than
// the file (src/models/gemma3.cpp): the period of 6 when the file names none, the sliding
// layers' RoPE base of 10 000 (unless rope.freq_base_swa) without the file's scaling, which
// only the global layers take, Q scaled by 1 / √head_dim, or 1 / √(n_embd / n_head) for the
// 27B (62 layers), and no final soft-cap unless the file sets one. The output is
// output.weight where the file has one, else token_embd.
#include <cmath>
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadGemma3Config(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.rope_style = RopeStyle::kNeox;
  TM_ASSIGN_OR_RETURN(uint32_t window, U32Or(file, p + "attention.sliding_window", 0));
  if (window > 0) {
    c.sliding_window = static_cast<int>(window);
    TM_RETURN_IF_ERROR(ReadSlidingLayers(file, c, 6));
    TM_ASSIGN_OR_RETURN(float base_swa, F32Or(file, p + "rope.freq_base_swa", 10000.0f));
    SetSlidingLayerRope(c, {base_swa, 1.0f});
  }
  TM_ASSIGN_OR_RETURN(c.final_softcap, F32Or(file, p + "final_logit_softcapping", 0.0f));
  return OkStatus();
}

StatusOr<LayerWeights> LoadGemma3Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                        F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  TM_RETURN_IF_ERROR(LoadHeadNorms(file, c, layer, copies, l));
  TM_RETURN_IF_ERROR(LoadPostNorms(file, c, layer, copies, l));
  return l;
}

float Gemma3QueryScale(const ModelConfig& c) {
  const int dim = c.n_layers == 62 ? c.n_embd / c.n_heads : c.head_dim;
  return 1.0f / std::sqrt(static_cast<float>(dim));
}

void Gemma3Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  const float query_scale = Gemma3QueryScale(c);
  b.Embed(w.token_embd, std::sqrt(static_cast<float>(c.n_embd)));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.HeadNorms(l.q_norm, l.k_norm);
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

const ModelFamily kGemma3Family{"gemma3", ReadGemma3Config, LoadGemma3Layer, Gemma3Forward};

}  // namespace tokenmill
