// The qwen2 family: llama's layer with biases on the Q, K and V projections and RoPE on
// NeoX-style pairs.
#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadQwen2Config(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = true;
  return OkStatus();
}

StatusOr<LayerWeights> LoadQwen2Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                       F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  TM_RETURN_IF_ERROR(LoadQkvBiases(file, c, layer, copies, l));
  return l;
}

void Qwen2Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
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
    b.SwiGluFeedForward(l.gate, l.up, l.down);
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kQwen2Family{"qwen2", ReadQwen2Config, LoadQwen2Layer, Qwen2Forward};

}  // namespace tokenmill
