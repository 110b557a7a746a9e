// The gemma family (Gemma 1): llama's layer with embeddings scaled by √n_embd, a GELU-tanh
// gated feed-forward, RoPE on NeoX pairs, Q scaled by 1 / √head_dim before attention and the
// output tied to token_embd. All of that is llama.cpp's code (src/models/gemma.cpp), not the
// file's metadata; the norm weights already hold Gemma's "1 +" (the GGUF converter adds it),
// so the norms are plain RMS norms.
#include <cmath>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadGemmaConfig(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.tied_output = true;  // llama.cpp reads no output.weight for gemma
  return OkStatus();
}

void GemmaForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  const float query_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  b.Embed(w.token_embd, std::sqrt(static_cast<float>(c.n_embd)));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.Attention({.factor = query_scale});
    b.AttentionOutput(l.o);
    b.AddResidual("sa_out", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    b.GeluFeedForward(l.gate, l.up, l.down);
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kGemmaFamily{"gemma", ReadGemmaConfig, LoadLlamaLayer, GemmaForward};

}  // namespace tokenmill
