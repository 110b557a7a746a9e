// The encoder families (ModelConfig::encoder: embeddings only, pooled as the file's
// pooling_type says; no output norm or head), as llama.cpp's llama_model_bert graph runs them:
// - bert (BERT, BGE, MiniLM): token, token-type and learned position embeddings, LayerNorm'd;
//   post-norm layers of bidirectional multi-head attention with biases and an ungated GELU
//   feed-forward, each followed by a residual add and a LayerNorm.
// - nomic-bert (nomic-embed-text): the same layer with RoPE on NeoX-style pairs instead of
//   position embeddings, Q, K and V in one tensor, biases where the file has them, and a
//   SwiGLU feed-forward.
#include "model/arch/family.h"

namespace tokenmill {
namespace {

Status ReadEncoderConfig(const GgufFile& file, ModelConfig& c) {
  const std::string causal = c.arch_name + ".attention.causal";
  if (file.Has(causal)) {
    TM_ASSIGN_OR_RETURN(const bool is_causal, file.GetBool(causal));
    if (is_causal) {
      return UnimplementedError(causal + " is true: tokenmill runs " + c.arch_name +
                                " as an encoder only");
    }
  }
  c.encoder = true;
  return OkStatus();
}

Status ReadBertConfig(const GgufFile& file, ModelConfig& c) {
  c.n_rot = 0;  // learned position embeddings, no RoPE
  return ReadEncoderConfig(file, c);
}

Status ReadNomicBertConfig(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  return ReadEncoderConfig(file, c);
}

// The vector `name` where the file has it, else empty (a block skips an empty bias).
StatusOr<std::span<const float>> OptionalVector(const GgufFile& file, const std::string& name,
                                                int64_t n, F32Copies& copies) {
  if (file.FindTensor(name) == nullptr) return std::span<const float>();
  return LoadVector(file, name, n, copies);
}

// The attention's tensors and the two post-norms: Q, K and V apart or fused (attn_qkv: the Q
// rows, then K's, V's), each bias where the file has it.
Status LoadEncoderAttention(const GgufFile& file, const ModelConfig& c, int layer,
                            F32Copies& copies, LayerWeights& l) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const ModelConfig::LayerShape shape = c.Shape(layer);
  const int64_t q_dim = shape.q_dim(c.n_heads), kv_dim = shape.kv_dim();
  const auto vector = [&](const std::string& name, int64_t n) {
    return OptionalVector(file, p + name, n, copies);
  };
  if (file.FindTensor(p + "attn_qkv.weight") != nullptr) {
    TM_ASSIGN_OR_RETURN(const WeightMatrix qkv,
                        LoadMatrix(file, p + "attn_qkv.weight", c.n_embd, q_dim + 2 * kv_dim));
    l.q = RowsOf(qkv, 0, q_dim);
    l.k = RowsOf(qkv, q_dim, kv_dim);
    l.v = RowsOf(qkv, q_dim + kv_dim, kv_dim);
    TM_ASSIGN_OR_RETURN(const std::span<const float> bias,
                        vector("attn_qkv.bias", q_dim + 2 * kv_dim));
    if (!bias.empty()) {
      l.q_bias = bias.subspan(0, q_dim);
      l.k_bias = bias.subspan(q_dim, kv_dim);
      l.v_bias = bias.subspan(q_dim + kv_dim, kv_dim);
    }
  } else {
    TM_ASSIGN_OR_RETURN(l.q, LoadMatrix(file, p + "attn_q.weight", c.n_embd, q_dim));
    TM_ASSIGN_OR_RETURN(l.k, LoadMatrix(file, p + "attn_k.weight", c.n_embd, kv_dim));
    TM_ASSIGN_OR_RETURN(l.v, LoadMatrix(file, p + "attn_v.weight", c.n_embd, kv_dim));
    TM_ASSIGN_OR_RETURN(l.q_bias, vector("attn_q.bias", q_dim));
    TM_ASSIGN_OR_RETURN(l.k_bias, vector("attn_k.bias", kv_dim));
    TM_ASSIGN_OR_RETURN(l.v_bias, vector("attn_v.bias", kv_dim));
  }
  TM_ASSIGN_OR_RETURN(l.o, LoadMatrix(file, p + "attn_output.weight", q_dim, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.o_bias, vector("attn_output.bias", c.n_embd));
  TM_ASSIGN_OR_RETURN(l.attn_out_norm,
                      LoadVector(file, p + "attn_output_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.attn_out_norm_bias,
                      LoadVector(file, p + "attn_output_norm.bias", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.layer_out_norm,
                      LoadVector(file, p + "layer_output_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.layer_out_norm_bias,
                      LoadVector(file, p + "layer_output_norm.bias", c.n_embd, copies));
  return OkStatus();
}

// The attention's tensors and the feed-forward's: bert's ungated up and down with biases, or
// nomic-bert's gated SwiGLU (`gated`).
StatusOr<LayerWeights> LoadEncoderLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                        F32Copies& copies, bool gated) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t n_ff = c.Shape(layer).n_ff;
  LayerWeights l;
  TM_RETURN_IF_ERROR(LoadEncoderAttention(file, c, layer, copies, l));
  if (gated) {
    TM_ASSIGN_OR_RETURN(l.gate, LoadMatrix(file, p + "ffn_gate.weight", c.n_embd, n_ff));
  }
  TM_ASSIGN_OR_RETURN(l.up, LoadMatrix(file, p + "ffn_up.weight", c.n_embd, n_ff));
  TM_ASSIGN_OR_RETURN(l.up_bias, OptionalVector(file, p + "ffn_up.bias", n_ff, copies));
  TM_ASSIGN_OR_RETURN(l.down, LoadMatrix(file, p + "ffn_down.weight", n_ff, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.down_bias, OptionalVector(file, p + "ffn_down.bias", c.n_embd, copies));
  return l;
}

StatusOr<LayerWeights> LoadBertLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                     F32Copies& copies) {
  return LoadEncoderLayer(file, c, layer, copies, /*gated=*/false);
}

StatusOr<LayerWeights> LoadNomicBertLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                          F32Copies& copies) {
  return LoadEncoderLayer(file, c, layer, copies, /*gated=*/true);
}

// The embeddings and a layer up to its feed-forward's input: attention, the residual add and
// its LayerNorm.
void EmbedEncoderInputs(const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd);
  b.AddEncoderInputs(w.encoder);
  b.LayerNorm(w.encoder.norm, w.encoder.norm_bias, "inp_norm");
}

void EncoderAttention(const LayerWeights& l, int layer, ForwardBlocks& b) {
  b.BeginLayer(layer);
  b.ProjectQkv(l.q, l.k, l.v);
  b.AddQkvBias(l.q_bias, l.k_bias, l.v_bias);
  b.Attention();  // RoPE where the config has it (nomic-bert), none in bert
  b.AttentionOutput(l.o, l.o_bias);
  b.AddResidual("attn_out", {});
  b.LayerNorm(l.attn_out_norm, l.attn_out_norm_bias, "attn_out_norm");
}

void EncoderOutput(const LayerWeights& l, ForwardBlocks& b) {
  b.AddResidual("ffn_out", {});
  b.LayerNorm(l.layer_out_norm, l.layer_out_norm_bias, "layer_out_norm");
}

void BertForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  EmbedEncoderInputs(w, b);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    EncoderAttention(l, layer, b);
    b.GeluMlp(l.up, l.up_bias, l.down, l.down_bias);
    EncoderOutput(l, b);
  }
  b.Logits(w.output_norm, w.output);
}

void NomicBertForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  EmbedEncoderInputs(w, b);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    EncoderAttention(l, layer, b);
    b.SwiGluFeedForward(l.gate, l.up, l.down);
    EncoderOutput(l, b);
  }
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kBertFamily{"bert", ReadBertConfig, LoadBertLayer, BertForward};
const ModelFamily kNomicBertFamily{"nomic-bert", ReadNomicBertConfig, LoadNomicBertLayer,
                                   NomicBertForward};

}  // namespace tokenmill
