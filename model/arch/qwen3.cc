// The qwen3 family: llama's layer with an RMS norm on each head of Q and K before RoPE, RoPE
// on NeoX-style pairs (llama.cpp's LLAMA_ROPE_TYPE_NEOX for qwen3, not in the file) and no
// biases. Its rerankers' scores are a softmax over the classification head's outputs
// (llama.cpp's rank pooling for qwen3).
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadQwen3Config(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.rank_softmax = true;
  return OkStatus();
}

StatusOr<LayerWeights> LoadQwen3Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                       F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  TM_RETURN_IF_ERROR(LoadHeadNorms(file, c, layer, copies, l));
  return l;
}

void Qwen3Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
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
    b.SwiGluFeedForward(l.gate, l.up, l.down);
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kQwen3Family{"qwen3", ReadQwen3Config, LoadQwen3Layer, Qwen3Forward};

}  // namespace tokenmill
