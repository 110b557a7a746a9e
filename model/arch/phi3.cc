// The phi3 family (Phi-3 and Phi-4 mini): llama's pre-norm layer with Q, K and V fused into
// one tensor and gate and up into another (each loaded as views of its parts), RoPE on
// NeoX-style pairs and Qcur scaled before the attention; the 128k models' LongRoPE factors are
// model-wide (LoadWeights).
#include <cmath>
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadPhi3Config(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  // phi3.attention.sliding_window is ignored, as llama.cpp ignores it (llama_model_phi3:
  // its converters fill it wrongly): every layer attends to its whole sequence.
  c.sliding_window = 0;
  return OkStatus();
}

StatusOr<LayerWeights> LoadPhi3Layer(const GgufFile& file, const ModelConfig& c, int layer,
                                      F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.attn_norm, LoadVector(file, p + "attn_norm.weight", c.n_embd, copies));
  // Fused when the file has attn_qkv (as the converter writes it): the Q rows, then K's, V's.
  if (file.FindTensor(p + "attn_qkv.weight") != nullptr) {
    TM_ASSIGN_OR_RETURN(const WeightMatrix qkv,
                        LoadMatrix(file, p + "attn_qkv.weight", c.n_embd,
                                   c.q_dim() + 2 * c.kv_dim()));
    l.q = RowsOf(qkv, 0, c.q_dim());
    l.k = RowsOf(qkv, c.q_dim(), c.kv_dim());
    l.v = RowsOf(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
  } else {
    TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, c.q_dim()));
    TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, c.kv_dim()));
    TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, c.kv_dim()));
  }
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", c.q_dim(), c.n_embd));
  TM_ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(file, p + "ffn_norm.weight", c.n_embd, copies));
  // The gate rows, then the up rows: ggml_swiglu's halves.
  TM_ASSIGN_OR_RETURN(const WeightMatrix gate_up,
                      LoadMatrix(file, p + "ffn_up.weight", c.n_embd, 2 * c.n_ff));
  l.gate = RowsOf(gate_up, 0, c.n_ff);
  l.up = RowsOf(gate_up, c.n_ff, c.n_ff);
  TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", c.n_ff, c.n_embd));
  return l;
}

void Phi3Forward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.Norm(l.attn_norm, "attn_norm");
    b.ProjectQkv(l.q, l.k, l.v);
    // As llama.cpp's phi3 graph: Qcur scaled by 1 / sqrt(head_dim) before the attention.
    b.Attention({.factor = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                 .may_scale_scores = true});
    b.AttentionOutput(l.o);
    b.AddResidual("ffn_inp", l.ffn_norm);
    b.Norm(l.ffn_norm, "ffn_norm");
    b.SwiGluFeedForward(l.gate, l.up, l.down);
    b.AddResidual("l_out", NextAttnNorm(w, layer));
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kPhi3Family{"phi3", ReadPhi3Config, LoadPhi3Layer, Phi3Forward};

}  // namespace tokenmill
