#include "model/forward.h"

#include <string>

namespace tokenmill {

ForwardPass::ForwardPass(const Model& model, CpuContext ctx, KernelMode mode)
    : model_(model), mode_(mode), blocks_(model.config(), model.weights().rope_freqs, ctx, mode) {}

Status ForwardPass::Run(const ForwardInput& in, const KvCacheView& kv, std::span<float> logits) {
  const ModelConfig& c = model_.config();
  // The reference kernels dequantize rows as the file lays them out; the fast ones read the
  // model's CPU copy (Q4_1 and Q8_0 regrouped 16 rows at a time).
  const ModelWeights& w =
      mode_ == KernelMode::kReference ? model_.weights() : model_.cpu_weights();
  TM_RETURN_IF_ERROR(ValidateForwardInput(c, in, kv, logits.size()));
  if (!KvTypeOnCpu(kv.type)) {
    return InvalidArgumentError("the CPU forward pass cannot read " +
                                std::string(KvTypeName(kv.type)) + " KV: use f16, f32 or int8");
  }
  ForwardBlocks& b = blocks_;
  b.BeginStep(in, kv, logits);
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    if (c.qkv_bias) b.AddQkvBias(l.q_bias, l.k_bias, l.v_bias);
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
  return OkStatus();
}

}  // namespace tokenmill
