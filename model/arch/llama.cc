// The llama family (general.architecture "llama", which mistral and smollm GGUFs also use):
// pre-norm layers of RmsNorm, grouped-query attention with RoPE on adjacent pairs, and a
// SwiGLU feed-forward network.
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadLlamaConfig(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kAdjacentPairs;
  return OkStatus();
}

StatusOr<LayerWeights> LoadLlamaLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                       F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(file, p + "attn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, c.q_dim()));
  TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, c.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, c.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", c.q_dim(), c.n_embd));
  TM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(file, p + "ffn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.gate, LoadMatrix(file, p + "ffn_gate.weight", c.n_embd, c.n_ff));
  TM_ASSIGN_OR_RETURN(l.up, LoadMatrix(file, p + "ffn_up.weight", c.n_embd, c.n_ff));
  TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", c.n_ff, c.n_embd));
  return l;
}

void LlamaForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.Attention();
    b.AttentionOutput(l.o);
    b.AddResidual("ffn_inp", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    b.SwiGluFeedForward(l.gate, l.up, l.down);
    // The next layer opens with its attn_norm (none after the last).
    b.AddResidual("l_out", layer + 1 < c.n_layers ? w.layers[layer + 1].attn_norm
                                                  : std::span<const float>());
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kLlamaFamily{"llama", ReadLlamaConfig, LoadLlamaLayer, LlamaForward};

}  // namespace tokenmill
