// The gemma3n family's text model (Gemma 3n E2B, E4B): gemma3's norms, per-head Q and K norms
// and GELU feed-forward, with V RMS-normed without a weight and q·k unscaled, inside AltUp
// (4 residual streams: the layer computes on a prediction of the first, whose correction then
// updates all four), LAuReL (a low-rank residual beside the attention), per-layer embeddings
// added to the other streams, activation sparsity in the first 10 layers, and KV shared across
// layers: past the first 20, a sliding layer reads layer 18's KV and a full one layer 19's.
// All of that from llama.cpp's code rather than the file (src/models/gemma3n.cpp, its
// hparams' defaults): 4 streams with the first active, LAuReL rank 64, per-layer width 256,
// the 20 storing layers, sparsity's 10 layers and 0.95 normal quantile, the final soft-cap of
// 30, the attention scale of 1, 5 sliding layers to 1 full unless the file's pattern says,
// and the sliding layers' RoPE base 10 000 unless rope.freq_base_swa.
#include <cmath>
#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

constexpr int kStreams = 4;
constexpr int kLaurelRank = 64;
constexpr int kPerLayerWidth = 256;
constexpr int kStoringLayers = 20;
constexpr int kSparseLayers = 10;
constexpr float kSparsityStdMultiplier = 1.6448533535003662f;  // normal_dist.icdf(0.95)

Status ReadGemma3nConfig(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.arch_name + ".";
  c.rope_style = RopeStyle::kNeox;
  TM_ASSIGN_OR_RETURN(uint32_t window, file.GetU32(p + "attention.sliding_window"));
  if (window == 0) return InvalidArgumentError(p + "attention.sliding_window must be positive");
  c.sliding_window = static_cast<int>(window);
  TM_RETURN_IF_ERROR(ReadSlidingLayers(file, c, 5));
  TM_ASSIGN_OR_RETURN(float base_swa, F32Or(file, p + "rope.freq_base_swa", 10000.0f));
  SetSlidingLayerRope(c, {base_swa, 1.0f});
  for (int layer = 0; layer < c.n_layers && c.n_layers > kStoringLayers; ++layer) {
    c.kv_source_layers.push_back(layer < kStoringLayers
                                     ? layer
                                     : kStoringLayers - (c.IsSlidingLayer(layer) ? 2 : 1));
  }
  c.n_embd_per_layer = kPerLayerWidth;
  c.altup_streams = kStreams;
  c.final_softcap = 30.0f;
  return OkStatus();
}

StatusOr<LayerWeights> LoadGemma3nLayer(const GgufFile& file, const ModelConfig& c, int layer,
                                        F32Copies& copies) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  // K, V and the K norm even where the layer reads another's KV: llama.cpp requires them.
  TM_ASSIGN_OR_RETURN(LayerWeights l, LoadLlamaLayer(file, c, layer, copies));
  TM_RETURN_IF_ERROR(LoadHeadNorms(file, c, layer, copies, l));
  TM_RETURN_IF_ERROR(LoadPostNorms(file, c, layer, copies, l));
  TM_ASSIGN_OR_RETURN(l.per_layer_gate,
                      LoadMatrix(file, p + "inp_gate.weight", c.n_embd, kPerLayerWidth));
  TM_ASSIGN_OR_RETURN(l.per_layer_proj,
                      LoadMatrix(file, p + "proj.weight", kPerLayerWidth, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.per_layer_post_norm,
                      LoadVector(file, p + "post_norm.weight", c.n_embd, copies));
  AltUpWeights& a = l.altup;
  TM_ASSIGN_OR_RETURN(a.router_norm,
                      LoadVector(file, p + "altup_router_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(a.router, LoadMatrix(file, p + "altup_router.weight", c.n_embd, kStreams));
  TM_ASSIGN_OR_RETURN(a.predict_coef, LoadMatrix(file, p + "altup_predict_coef.weight", kStreams,
                                                 kStreams * kStreams));
  TM_ASSIGN_OR_RETURN(a.correct_coef,
                      LoadMatrix(file, p + "altup_correct_coef.weight", kStreams, kStreams));
  TM_ASSIGN_OR_RETURN(a.correct_scale,
                      LoadVector(file, p + "altup_correct_scale.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(l.laurel.left,
                      LoadMatrix(file, p + "laurel_l.weight", c.n_embd, kLaurelRank));
  TM_ASSIGN_OR_RETURN(l.laurel.right,
                      LoadMatrix(file, p + "laurel_r.weight", kLaurelRank, c.n_embd));
  TM_ASSIGN_OR_RETURN(l.laurel.post_norm,
                      LoadVector(file, p + "laurel_post_norm.weight", c.n_embd, copies));
  return l;
}

void Gemma3nForward(const ModelConfig& c, const ModelWeights& w, ForwardBlocks& b) {
  b.Embed(w.token_embd, std::sqrt(static_cast<float>(c.n_embd)));
  b.PerLayerInputs(w.per_layer);
  b.AltUpStreams(w.altup_proj);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    b.BeginLayer(layer);
    b.AltUpPredict(l.altup);
    b.Norm(l.attn_norm, "attn_norm");
    b.Laurel(l.laurel);
    NormedQkvOrQ(c, layer, l, b);
    b.Attention({.factor = 1.0f});
    b.AttentionOutput(l.o);
    b.PostNorm(l.attn_post_norm, "attn_post_norm");
    b.AddResidual("attn_gated", {});
    b.AddLaurel();
    b.Norm(l.ffn_norm, "ffn_norm");
    if (layer < kSparseLayers) {
      b.SparseGeluFeedForward(l.gate, l.up, l.down, kSparsityStdMultiplier);
    } else {
      b.GeluFeedForward(l.gate, l.up, l.down);
    }
    b.PostNorm(l.ffn_post_norm, "ffn_post_norm");
    b.AddResidual("attn_ffw_laurel_gated", {});
    b.AltUpCorrect(l.altup, l.per_layer_gate, l.per_layer_proj, l.per_layer_post_norm);
  }
  b.AltUpMerge(w.altup_unembd_proj);
  b.Logits(w.output_norm, w.output);
}

}  // namespace

const ModelFamily kGemma3nFamily{"gemma3n", ReadGemma3nConfig, LoadGemma3nLayer,
                                 Gemma3nForward};

}  // namespace tokenmill
