// The bert family (BERT, BGE, MiniLM and other sentence-embedding encoders): token, token-type
// and learned position embeddings, LayerNorm'd; post-norm layers of bidirectional multi-head
// attention with biases and an ungated GELU feed-forward, each followed by a residual add and a
// LayerNorm; no output norm or head (ModelConfig::encoder: embeddings only, pooled as the
// file's pooling_type says). As llama.cpp's llama_model_bert.
#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadBertConfig(const GgufFile& file, ModelConfig& c) {
  const std::string causal = c.arch_name + ".attention.causal";
  if (file.Has(causal)) {
    TM_ASSIGN_OR_RETURN(const bool is_causal, file.GetBool(causal));
    if (is_causal) {
      return UnimplementedError(causal + " is true: tokenmill runs bert as an encoder only");
    }
  }
  c.encoder = true;
  c.n_rot = 0;  // learned position embeddings, no RoPE
  return OkStatus();
}

StatusOr<LayerWeights> LoadBertLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                     F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const ModelConfig::LayerShape shape = c.Shape(layer);
  const int q_dim = shape.q_dim(c.n_heads);
  const auto vector = [&](const std::string& name, int64_t n) {
    return LoadVector(file, p + name, n, copies);
  };
  LayerWeights l;
  TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, q_dim));
  TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, shape.kv_dim()));
  TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, shape.kv_dim()));
  TM_RETURN_IF_ERROR(LoadQkvBiases(file, c, layer, copies, l));
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", q_dim, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.o_bias, vector("attn_output.bias", c.n_embd));
  TM_ASSIGN_OR_RETURN(l.attn_out_norm, vector("attn_output_norm.weight", c.n_embd));
  TM_ASSIGN_OR_RETURN(l.attn_out_norm_bias, vector("attn_output_norm.bias", c.n_embd));
  TM_ASSIGN_OR_RETURN(l.up, LoadMatrix(file, p + "ffn_up.weight", c.n_embd, shape.n_ff));
  TM_ASSIGN_OR_RETURN(l.up_bias, vector("ffn_up.bias", shape.n_ff));
  TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", shape.n_ff, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.down_bias, vector("ffn_down.bias", c.n_embd));
  TM_ASSIGN_OR_RETURN(l.layer_out_norm, vector("layer_output_norm.weight", c.n_embd));
  TM_ASSIGN_OR_RETURN(l.layer_out_norm_bias, vector("layer_output_norm.bias", c.n_embd));
  return l;
}

void BertForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  b.AddEncoderInputs(w.encoder);
  b.LayerNorm(w.encoder.norm, w.encoder.norm_bias, "inp_norm");
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.ProjectQkv(l.q, l.k, l.v);
    b.AddQkvBias(l.q_bias, l.k_bias, l.v_bias);
    b.Attention();
    b.AttentionOutput(l.o, l.o_bias);
    b.AddResidual("attn_out", {});
    b.LayerNorm(l.attn_out_norm, l.attn_out_norm_bias, "attn_out_norm");
    b.GeluMlp(l.up, l.up_bias, l.down, l.down_bias);
    b.AddResidual("ffn_out", {});
    b.LayerNorm(l.layer_out_norm, l.layer_out_norm_bias, "layer_out_norm");
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kBertFamily{"bert", ReadBertConfig, LoadBertLayer, BertForward};

}  // namespace tokenmill
