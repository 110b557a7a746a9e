// The weights of a model as views into the GGUF memory map: matrices are neither copied nor
// dequantized at load (any type CpuComputesWith accepts, each its own), and only norms and
// biases that the file holds in f16 or bf16 are converted to f32 once. Shapes and types are
// checked against the config. The model-wide tensors are loaded here, each layer's by its
// family (model/arch/).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/matmul.h"
#include "model/config.h"

namespace tokenmill {

// A mixture-of-experts feed-forward's tensors (ExpertConfig): the router, each expert's gate,
// up and down matrices (views into the file's 3-D ffn_*_exps tensors, one expert's rows after
// the other's, or parts of a merged ffn_gate_up_exps) and the shared expert with its gate.
struct MoeWeights {
  WeightMatrix router;                 // ffn_gate_inp: n_expert rows of n_embd
  std::span<const float> router_bias;  // ffn_gate_inp.bias (gpt-oss), or empty
  // Added to the probabilities for choosing experts only, not to their weights
  // (exp_probs_b.bias: DeepSeek-V3's score correction), or empty.
  std::span<const float> selection_bias;
  std::vector<WeightMatrix> gate, up, down;  // one per expert
  // Per-expert biases (gpt-oss), n_expert rows of the matrix's outputs each, or empty.
  std::span<const float> gate_bias, up_bias, down_bias;
  // The shared expert (qwen2moe, deepseek2), rows = 0 when none; shared_gate_inp is one row of
  // n_embd whose sigmoid scales its output (qwen2moe), or rows = 0: added as it is.
  WeightMatrix shared_gate, shared_up, shared_down, shared_gate_inp;
};

// A layer's AltUp (gemma3n: several residual streams, the first of them the active one the
// layer computes on): the router over a normed stream (router_norm, router: n_streams rows of
// n_embd), the prediction's coefficients (predict_coef: n_streams² rows of n_streams), the
// correction's (correct_coef: n_streams rows of n_streams) and the scale of the corrected
// active stream before the per-layer embedding (correct_scale: n_embd).
struct AltUpWeights {
  std::span<const float> router_norm;
  WeightMatrix router, predict_coef, correct_coef;
  std::span<const float> correct_scale;
};

// A layer's LAuReL (gemma3n): a low-rank residual, post_norm(right · left · h) + h.
struct LaurelWeights {
  WeightMatrix left, right;  // laurel_l: rank rows of n_embd; laurel_r: n_embd rows of rank
  std::span<const float> post_norm;
};

// A layer's multi-head latent attention (ModelConfig::mla, deepseek2).
struct LatentAttentionWeights {
  // The query's LoRA: attn_q_a (q_lora_rank rows of n_embd), its norm, attn_q_b (n_heads x
  // (qk_nope + n_rot) rows of q_lora_rank); without one (q_lora_rank 0), attn_q (as many rows
  // of n_embd).
  WeightMatrix q_a, q_b, q;
  std::span<const float> q_a_norm;
  WeightMatrix kv_a;  // attn_kv_a_mqa: kv_lora_rank + n_rot rows of n_embd
  std::span<const float> kv_a_norm;  // of the latent: kv_lora_rank
  // Per head: attn_k_b (kv_lora_rank rows of qk_nope: the query into the latent space) and
  // attn_v_b (v_head rows of kv_lora_rank: the attention output out of it).
  std::vector<WeightMatrix> k_b, v_b;
};

// The tensors a layer may have (as llama.cpp's llama_layer); its family loads those it uses
// and leaves the others empty.
struct LayerWeights {
  std::span<const float> attn_norm;
  WeightMatrix q, k, v, o;
  std::span<const float> q_bias, k_bias, v_bias;  // qwen2
  std::span<const float> o_bias;      // of the attention output (gpt-oss)
  std::span<const float> attn_sinks;  // one attention-sink logit per query head (gpt-oss)
  std::span<const float> q_norm, k_norm;  // per-head RMS norms of Q and K (qwen3, gemma3)
  std::span<const float> attn_post_norm;  // of the attention's output (gemma2, gemma3)
  std::span<const float> ffn_norm;
  WeightMatrix gate, up, down;
  std::span<const float> ffn_post_norm;  // of the feed-forward's output (gemma2, gemma3)
  MoeWeights moe;  // ModelConfig::experts.n_expert > 0, instead of gate, up and down
  LatentAttentionWeights mla;  // ModelConfig::mla (deepseek2), instead of k and v
  // The per-layer embedding's gate (inp_gate: width rows of n_embd), projection back (proj:
  // n_embd rows of width) and its norm (post_norm) (gemma3n, gemma4); empty without.
  WeightMatrix per_layer_gate, per_layer_proj;
  std::span<const float> per_layer_post_norm;
  std::span<const float> out_scale;  // one factor of the layer's output (gemma4), or empty
  AltUpWeights altup;    // gemma3n
  LaurelWeights laurel;  // gemma3n
  // An encoder's post-norms (bert: LayerNorm weight and bias) of the residual after the
  // attention and after the feed-forward, and its feed-forward's biases; empty without.
  std::span<const float> attn_out_norm, attn_out_norm_bias, layer_out_norm, layer_out_norm_bias;
  std::span<const float> up_bias, down_bias;
};

// Per-layer embeddings (gemma3n, gemma4): each token's input of every layer, `width` values
// each, from its row of token_embd and the embedding projected through model_proj.
struct PerLayerEmbeddings {
  int width = 0;            // 0: none
  WeightMatrix token_embd;  // per_layer_token_embd: n_vocab rows of n_layers x width
  WeightMatrix model_proj;  // per_layer_model_proj: n_layers x width rows of n_embd
  std::span<const float> proj_norm;  // per_layer_proj_norm: width
};

// What an encoder (ModelConfig::encoder, bert) adds to the token embeddings and norms them
// with before its first layer.
struct EncoderInputs {
  std::span<const float> token_type;  // token_types' row 0 (every token is "sentence A")
  WeightMatrix position_embd;  // context_length rows of n_embd, by position; none when roped
  std::span<const float> norm, norm_bias;  // token_embd_norm: LayerNorm weight and bias
};

// A reranker's classification head (pooling rank: llama.cpp's cls, cls_b, cls_out, cls_out_b),
// over the pooled hidden state: dense (n_embd rows of n_embd) + bias and tanh where the file
// has them, then out (n_cls_out rows) + bias where it has that. rows = 0: absent.
struct ClassifierWeights {
  WeightMatrix dense, out;
  std::span<const float> dense_bias, out_bias;
  bool present() const { return dense.rows > 0 || out.rows > 0; }
};

// Norms and biases converted to f32 at load; the spans of the weights point into them (a moved
// or reallocated outer vector keeps each inner buffer where it was).
using F32Copies = std::vector<std::vector<float>>;

struct ModelWeights {
  WeightMatrix token_embd;  // n_vocab rows of n_embd
  std::span<const float> output_norm;  // empty for an encoder
  WeightMatrix output;  // token_embd when tied; none (0 rows) for an encoder
  std::span<const float> rope_freqs;  // empty unless the file has rope_freqs.weight
  EncoderInputs encoder;  // ModelConfig::encoder only
  ClassifierWeights classifier;  // where the file has cls or cls.output
  PerLayerEmbeddings per_layer;
  // AltUp's projections of the embedding into the streams after the first and of those
  // streams back at the end (gemma3n's altup_proj, altup_unembd_proj), or empty.
  std::vector<WeightMatrix> altup_proj, altup_unembd_proj;
  std::vector<LayerWeights> layers;
  std::shared_ptr<const F32Copies> f32_copies;  // shared by copies of these weights
};

// A model's parameters (the elements of its tensors) and those one token computes with: all
// but the experts it is not routed to (ModelConfig::experts), as "30B-A3B" counts them.
struct ParameterCount {
  int64_t total = 0;
  int64_t active_per_token = 0;
};
ParameterCount CountParameters(const GgufFile& file, const ModelConfig& config);

// The largest key bias of a model whose keys have biases (qwen2), beside the median |bias| of
// its layer: Qwen2.5's reach hundreds of times their median, which a quantized KV cache cannot
// hold (docs/benchmarks.md, "4-bit KV cache"). Empty without key biases.
struct KeyBiasPeak {
  int layer = 0;
  float max_abs = 0.0f;
  float median_abs = 0.0f;
};
std::optional<KeyBiasPeak> LargestKeyBias(const ModelWeights& weights);

// context: the context the model is served with (ModelOptions::context, resolved).
StatusOr<ModelWeights> LoadWeights(const GgufFile& file, const ModelConfig& config,
                                   const ModelFamily& family, int context);

// The vector `name` of n elements (norms, biases, frequency factors) as f32: a view of an f32
// tensor, or an f16/bf16 one converted into `copies`.
StatusOr<std::span<const float>> LoadVector(const GgufFile& file, const std::string& name,
                                            int64_t n, F32Copies& copies);
// The n_expert vectors of n of the 2-D tensor `name` (ggml shape [n, n_expert]: gpt-oss's
// per-expert biases), one after the other, as LoadVector loads one.
StatusOr<std::span<const float>> LoadExpertVectors(const GgufFile& file,
                                                   const std::string& name, int64_t n,
                                                   int64_t n_expert, F32Copies& copies);
// Rows [begin, begin + n) of w, a matrix of their own: the parts of a fused tensor (phi3's
// attn_qkv), each output row computed as the whole tensor's would be.
WeightMatrix RowsOf(const WeightMatrix& w, int64_t begin, int64_t n);
// The matrix `name` of `rows` outputs by `cols` inputs (ggml shape [cols, rows]), of a type
// the kernels compute with (CpuComputesWith); other types are refused naming the tensor, its
// type and the supported ones.
StatusOr<WeightMatrix> LoadMatrix(const GgufFile& file, const std::string& name, int64_t cols,
                                  int64_t rows);
// The n_expert matrices of the 3-D tensor `name` (ggml shape [cols, rows, n_expert]), each a
// view of its expert's rows, refused as LoadMatrix refuses.
StatusOr<std::vector<WeightMatrix>> LoadExpertMatrices(const GgufFile& file,
                                                       const std::string& name, int64_t cols,
                                                       int64_t rows, int64_t n_expert);
// A one-row matrix of `cols` stored as a 1-D tensor (qwen2moe's ffn_gate_inp_shexp).
StatusOr<WeightMatrix> LoadRowVector(const GgufFile& file, const std::string& name,
                                     int64_t cols);

}  // namespace tokenmill
