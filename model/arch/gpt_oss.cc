// The gpt-oss family (OpenAI's gpt-oss-20b and -120b; llama.cpp's LLM_ARCH_OPENAI_MOE,
// src/models/openai-moe.cpp): attention with Q/K/V and output biases and one learned sink
// logit per query head, NeoX RoPE (YaRN in the released files), sliding-window attention on
// alternate layers, and a mixture of experts with a biased router and per-expert biases whose
// top-k logits are softmaxed (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT, not renormalized)
// and whose experts run the clamped SwiGLU (ggml_swiglu_oai). The feed-forward's norm is
// post_attention_norm. From llama.cpp's code rather than the file: the period 2 of the
// sliding layers when the file names none (even layers slide), the sliding layers' RoPE (the
// global one unless rope.freq_base_swa), the gating, SwiGLU's alpha 1.702 and limit 7, no
// weight scale, and Q·K scaled by 1 / √n_rot (tokenmill requires n_rot = head_dim).
#include <string>
#include <tuple>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadGptOssConfig(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.rope_style = RopeStyle::kNeox;
  if (c.tied_output) {
    return InvalidArgumentError("a gpt-oss model needs its own 'output.weight' (llama.cpp does "
                                "not tie it to token_embd.weight)");
  }
  if (c.n_rot != c.head_dim) {
    return UnimplementedError(p + "rope.dimension_count (" + std::to_string(c.n_rot) +
                              ") differs from the head size (" + std::to_string(c.head_dim) +
                              "): tokenmill runs gpt-oss with RoPE over whole heads");
  }
  TM_RETURN_IF_ERROR(ReadExpertKeys(file, c, /*shared=*/false));
  if (c.experts.n_expert == 0) {
    return InvalidArgumentError("a gpt-oss model needs " + p + "expert_count > 0");
  }
  if (!file.Has(p + "expert_feed_forward_length")) {
    return InvalidArgumentError("a gpt-oss model needs " + p +
                                "expert_feed_forward_length (each expert's width)");
  }
  c.experts.gating = ExpertGating::kSoftmaxSelected;
  c.experts.normalize = false;
  if (!file.Has(p + "attention.sliding_window")) {
    return InvalidArgumentError("a gpt-oss model needs " + p + "attention.sliding_window");
  }
  TM_ASSIGN_OR_RETURN(uint32_t window, file.GetU32(p + "attention.sliding_window"));
  if (window == 0) {
    return InvalidArgumentError(p + "attention.sliding_window must be positive");
  }
  c.sliding_window = static_cast<int>(window);
  TM_RETURN_IF_ERROR(ReadSlidingLayers(file, c, 2));
  if (file.Has(p + "rope.freq_base_swa")) {
    TM_ASSIGN_OR_RETURN(float base_swa, file.GetF32(p + "rope.freq_base_swa"));
    SetSlidingLayerRope(c, {base_swa, c.rope_position_scale});
  }
  return OkStatus();
}

StatusOr<LayerWeights> LoadGptOssLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                       F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const ExpertConfig& e = c.experts;
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(file, p + "attn_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, c.q_dim()));
  TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, c.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, c.kv_dim()));
  // llama.cpp takes each of Q, K and V's biases when the file has it.
  for (auto [name, size, bias] : {std::tuple{"attn_q.bias", c.q_dim(), &l.q_bias},
                                  std::tuple{"attn_k.bias", c.kv_dim(), &l.k_bias},
                                  std::tuple{"attn_v.bias", c.kv_dim(), &l.v_bias}}) {
    if (file.FindTensor(p + name) == nullptr) continue;
    TM_ASSIGN_OR_RETURN(*bias, LoadVector(file, p + name, size, copies));
  }
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", c.q_dim(), c.n_embd));
  TM_ASSIGN_OR_RETURN(l.o_bias, LoadVector(file, p + "attn_output.bias", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.attn_sinks,
                      LoadVector(file, p + "attn_sinks.weight", c.n_heads, copies));
  TM_ASSIGN_OR_RETURN(l.ffn_norm,
                      LoadVector(file, p + "post_attention_norm.weight", c.n_embd, copies));
  TM_RETURN_IF_ERROR(LoadExperts(file, c, layer, l));
  MoeWeights& m = l.moe;
  TM_ASSIGN_OR_RETURN(m.router_bias,
                      LoadVector(file, p + "ffn_gate_inp.bias", e.n_expert, copies));
  TM_ASSIGN_OR_RETURN(m.gate_bias, LoadExpertVectors(file, p + "ffn_gate_exps.bias",
                                                     e.n_ff_exp, e.n_expert, copies));
  TM_ASSIGN_OR_RETURN(m.up_bias, LoadExpertVectors(file, p + "ffn_up_exps.bias", e.n_ff_exp,
                                                   e.n_expert, copies));
  TM_ASSIGN_OR_RETURN(m.down_bias, LoadExpertVectors(file, p + "ffn_down_exps.bias", c.n_embd,
                                                     e.n_expert, copies));
  return l;
}

void GptOssForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    b.AddQkvBias(l.q_bias, l.k_bias, l.v_bias);
    b.Attention({}, l.attn_sinks);
    b.AttentionOutput(l.o, l.o_bias);
    b.AddResidual("ffn_inp", l.ffn_norm);
    b.Norm(l.ffn_norm, "attn_post_norm");
    b.OaiMoeFeedForward(l.moe);
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kGptOssFamily{"gpt-oss", ReadGptOssConfig, LoadGptOssLayer, GptOssForward};

}  // namespace tokenmill
