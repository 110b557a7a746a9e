// The llama family (general.architecture "llama", which mistral and smollm GGUFs also use):
// pre-norm layers of RmsNorm, grouped-query attention with RoPE on adjacent pairs, and a
// SwiGLU feed-forward network, or a mixture of experts where the file has experts (Mixtral:
// llama.cpp's softmax gating with renormalized top-k weights, each expert feed_forward_length
// wide, expert_feed_forward_length and expert_weights_scale not read).
#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadLlamaConfig(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kAdjacentPairs;
  TM_RETURN_IF_ERROR(ReadExpertKeys(file, c, /*shared=*/false));
  c.experts.n_ff_exp = c.experts.n_expert > 0 ? c.n_ff : 0;
  c.experts.gating = ExpertGating::kSoftmax;
  c.experts.normalize = true;
  return OkStatus();
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
    if (c.experts.n_expert > 0) {
      b.MoeFeedForward(l.moe);
    } else {
      b.SwiGluFeedForward(l.gate, l.up, l.down);
    }
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kLlamaFamily{"llama", ReadLlamaConfig, LoadLlamaLayer, LlamaForward};

}  // namespace tokenmill
