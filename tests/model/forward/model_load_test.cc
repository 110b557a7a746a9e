// Model config and weights from GGUF metadata: what is read, and what is refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "model/model.h"
#include "tests/gguf/gguf_builder.h"

namespace tokenmill {
namespace {

using ::testing::HasSubstr;
using testing::GgufBuilder;

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_1 = 3, kQ5_0 = 6, kQ8_0 = 8, kBF16 = 30;

// A one-layer model of width `width` (2 heads of width / 2, 1 KV head, vocabulary 8), every
// tensor f32 except attn_q (ggml type `q_type`), token_embd (`embd_type`) and attn_norm
// (`norm_type`). Tensor bytes are `fill` (0: all zero).
struct TinyModel {
  std::string arch = "llama";
  uint64_t width = 32;
  uint32_t q_type = kF32;
  uint32_t embd_type = kF32;
  uint32_t norm_type = kF32;
  uint8_t fill = 0;
  bool qkv_bias = false;
  bool rope_freqs = false;
  bool output = false;
  bool fused = false;  // phi3's attn_qkv and fused ffn_up (gate rows, then up rows)
  std::vector<std::string> rope_factor_tensors;  // e.g. rope_factors_long.weight
  std::string skip_tensor;  // left out of the file
  std::vector<std::pair<std::string, std::string>> extra_strings;
  std::vector<std::pair<std::string, float>> extra_floats;
  std::vector<std::pair<std::string, uint32_t>> extra_u32s;

  std::vector<uint8_t> Build() const {
    GgufBuilder b;
    const std::string p = arch + ".";
    const uint64_t w = width;
    b.KeyString("general.architecture", arch)
        .KeyU32(p + "block_count", 1)
        .KeyU32(p + "embedding_length", static_cast<uint32_t>(w))
        .KeyU32(p + "attention.head_count", 2)
        .KeyU32(p + "attention.head_count_kv", 1)
        .KeyU32(p + "feed_forward_length", static_cast<uint32_t>(2 * w))
        .KeyU32(p + "context_length", 256)
        .KeyF32(p + "attention.layer_norm_rms_epsilon", 1e-6f)
        .KeyF32(p + "rope.freq_base", 500000.0f);
    for (const auto& [k, v] : extra_strings) b.KeyString(p + k, v);
    for (const auto& [k, v] : extra_floats) b.KeyF32(p + k, v);
    for (const auto& [k, v] : extra_u32s) b.KeyU32(p + k, v);
    auto tensor = [&](const std::string& name, uint32_t type, std::vector<uint64_t> shape) {
      if (name == skip_tensor) return;
      const GgmlTypeLayout layout = *FindGgmlType(type);
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      const auto bytes = static_cast<size_t>(n / layout.block_size * layout.type_size);
      b.Tensor(name, type, shape, std::vector<uint8_t>(bytes, fill));
    };
    auto f32 = [&](const std::string& name, std::vector<uint64_t> shape) {
      tensor(name, kF32, std::move(shape));
    };
    tensor("token_embd.weight", embd_type, {w, 8});
    f32("output_norm.weight", {w});
    if (output) f32("output.weight", {w, 8});
    if (rope_freqs) f32("rope_freqs.weight", {w / 4});
    for (const std::string& name : rope_factor_tensors) f32(name, {w / 4});
    tensor("blk.0.attn_norm.weight", norm_type, {w});
    if (fused) {
      tensor("blk.0.attn_qkv.weight", q_type, {w, 2 * w});
    } else {
      tensor("blk.0.attn_q.weight", q_type, {w, w});
      f32("blk.0.attn_k.weight", {w, w / 2});
      f32("blk.0.attn_v.weight", {w, w / 2});
    }
    if (qkv_bias) {
      f32("blk.0.attn_q.bias", {w});
      f32("blk.0.attn_k.bias", {w / 2});
      f32("blk.0.attn_v.bias", {w / 2});
    }
    f32("blk.0.attn_output.weight", {w, w});
    f32("blk.0.ffn_norm.weight", {w});
    if (fused) {
      f32("blk.0.ffn_up.weight", {w, 4 * w});
    } else {
      f32("blk.0.ffn_gate.weight", {w, 2 * w});
      f32("blk.0.ffn_up.weight", {w, 2 * w});
    }
    f32("blk.0.ffn_down.weight", {2 * w, w});
    return b.Build();
  }
};

StatusOr<std::unique_ptr<Model>> Load(const std::vector<uint8_t>& bytes) {
  TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Parse(bytes));
  return Model::FromFile(std::move(file));
}

TEST(ModelLoadTest, ReadsTheConfigAndViewsTheWeightsInPlace) {
  const std::vector<uint8_t> bytes = TinyModel{}.Build();
  StatusOr<std::unique_ptr<Model>> model = Load(bytes);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.n_layers, 1);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.n_rot, 16);
  EXPECT_EQ(c.n_ff, 64);
  EXPECT_EQ(c.n_vocab, 8);
  EXPECT_EQ(c.context_length, 256);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 500000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_TRUE(c.tied_output);
  const ModelWeights& w = (*model)->weights();
  EXPECT_EQ(w.output.data, w.token_embd.data);  // tied: the same bytes
  EXPECT_EQ(w.layers[0].k.rows, 16);
  EXPECT_EQ(w.layers[0].k.cols, 32);
  // A view into the caller's bytes, not a copy.
  EXPECT_GE(w.layers[0].q.data, bytes.data());
  EXPECT_LT(w.layers[0].q.data, bytes.data() + bytes.size());
}

// The CPU forward pass reads Q4_1 (and Q8_0) matrices regrouped 16 rows at a time from a
// copy the model owns; everything else, and the file's views in weights(), stay as in the file.
TEST(ModelLoadTest, CpuWeightsRegroupQ4_1MatricesIntoTheModelsOwnCopy) {
  TinyModel tiny;
  tiny.q_type = kQ4_1;
  const std::vector<uint8_t> bytes = tiny.Build();
  StatusOr<std::unique_ptr<Model>> model = Load(bytes);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const LayerWeights& file = (*model)->weights().layers[0];
  const LayerWeights& cpu = (*model)->cpu_weights().layers[0];
  EXPECT_EQ(file.q.layout, WeightLayout::kRows);
  EXPECT_EQ(cpu.q.layout, WeightLayout::kRowGroups16);
  EXPECT_EQ(cpu.q.type, TensorType::kQ4_1);
  EXPECT_EQ(cpu.q.rows, file.q.rows);
  EXPECT_EQ(cpu.q.cols, file.q.cols);
  // Not a view into the file.
  EXPECT_FALSE(cpu.q.data >= bytes.data() && cpu.q.data < bytes.data() + bytes.size());
  EXPECT_EQ((*model)->cpu_copy_bytes(), 32 * 20);
  // F32 matrices and the embedding are the file's views.
  EXPECT_EQ(cpu.k.data, file.k.data);
  EXPECT_EQ(cpu.k.layout, WeightLayout::kRows);
  EXPECT_EQ((*model)->cpu_weights().token_embd.data, (*model)->weights().token_embd.data);
  EXPECT_EQ((*model)->cpu_weights().output.data, (*model)->weights().output.data);
}

TEST(ModelLoadTest, CpuWeightsRegroupQ8_0MatricesToo) {
  TinyModel tiny;
  tiny.q_type = kQ8_0;
  StatusOr<std::unique_ptr<Model>> model = Load(tiny.Build());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->cpu_weights().layers[0].q.layout, WeightLayout::kRowGroups16);
  EXPECT_EQ((*model)->weights().layers[0].q.layout, WeightLayout::kRows);
  EXPECT_EQ((*model)->cpu_copy_bytes(), 32 * 34);
}

TEST(ModelLoadTest, AnF32ModelNeedsNoCpuCopy) {
  StatusOr<std::unique_ptr<Model>> model = Load(TinyModel{}.Build());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->cpu_copy_bytes(), 0);
  EXPECT_EQ((*model)->cpu_weights().layers[0].q.data, (*model)->weights().layers[0].q.data);
}

TEST(ModelLoadTest, Qwen2HasBiasesAndNeoxRope) {
  TinyModel qwen;
  qwen.arch = "qwen2";
  qwen.qkv_bias = true;
  qwen.output = true;
  StatusOr<std::unique_ptr<Model>> model = Load(qwen.Build());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->config().rope_style, RopeStyle::kNeox);
  EXPECT_TRUE((*model)->config().qkv_bias);
  EXPECT_FALSE((*model)->config().tied_output);
  EXPECT_EQ((*model)->weights().layers[0].k_bias.size(), 16u);

  qwen.qkv_bias = false;
  const StatusOr<std::unique_ptr<Model>> missing = Load(qwen.Build());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("blk.0.attn_q.bias"));
}

// The key bias a quantized KV cache cannot hold (the server warns of it): the largest |bias|
// of all layers, beside its own layer's median; nothing for a model without key biases.
TEST(ModelLoadTest, LargestKeyBiasFindsTheOutlierLayer) {
  ModelWeights weights;
  weights.layers.resize(3);
  const std::vector<float> small = {1.0f, -2.0f, 3.0f, 4.0f};
  const std::vector<float> spiked = {0.5f, -0.7f, 0.6f, -354.0f};
  weights.layers[0].k_bias = small;
  weights.layers[2].k_bias = spiked;
  const std::optional<KeyBiasPeak> peak = LargestKeyBias(weights);
  ASSERT_TRUE(peak.has_value());
  EXPECT_EQ(peak->layer, 2);
  EXPECT_EQ(peak->max_abs, 354.0f);
  EXPECT_EQ(peak->median_abs, 0.7f);  // the upper median of 0.5, 0.6, 0.7, 354
  weights.layers[0].k_bias = {};
  weights.layers[2].k_bias = {};
  EXPECT_FALSE(LargestKeyBias(weights).has_value());
}

TEST(ModelLoadTest, Llama3RopeFrequenciesAndLinearScaling) {
  TinyModel llama3;
  llama3.rope_freqs = true;
  llama3.extra_strings = {{"rope.scaling.type", "linear"}};
  llama3.extra_floats = {{"rope.scaling.factor", 4.0f}};
  StatusOr<std::unique_ptr<Model>> model = Load(llama3.Build());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->weights().rope_freqs.size(), 8u);
  EXPECT_FLOAT_EQ((*model)->config().rope_position_scale, 0.25f);
}

TEST(ModelLoadTest, RefusesWhatItCannotRunByName) {
  TinyModel gpt2_model;
  gpt2_model.arch = "gpt2";
  const StatusOr<std::unique_ptr<Model>> gpt2 = Load(gpt2_model.Build());
  ASSERT_FALSE(gpt2.ok());
  EXPECT_THAT(gpt2.status().message(), HasSubstr("architecture 'gpt2' is not supported"));

  TinyModel dynamic;
  dynamic.extra_strings = {{"rope.scaling.type", "dynamic"}};
  const StatusOr<std::unique_ptr<Model>> dynamic_model = Load(dynamic.Build());
  ASSERT_FALSE(dynamic_model.ok());
  EXPECT_THAT(dynamic_model.status().message(), HasSubstr("RoPE scaling 'dynamic'"));
}

// YaRN as llama.cpp sets it up: positions scaled by 1 / factor, ext_factor 1, and an
// attention factor that cancels the magnitude ggml's rope multiplies in (1 here: no
// rope.scaling.attn_factor), the correction range from the original context.
TEST(ModelLoadTest, YarnScalingReadsFactorAndOriginalContext) {
  TinyModel yarn;
  yarn.extra_strings = {{"rope.scaling.type", "yarn"}};
  yarn.extra_floats = {{"rope.scaling.factor", 8.0f}};
  yarn.extra_u32s = {{"rope.scaling.original_context_length", 32}};
  StatusOr<std::unique_ptr<Model>> model = Load(yarn.Build());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = (*model)->config();
  EXPECT_FLOAT_EQ(c.rope_position_scale, 0.125f);
  EXPECT_EQ(c.rope_ext_factor, 1.0f);
  EXPECT_NEAR(c.rope_attn_factor, 1.0f, 1e-6f);
  EXPECT_EQ(c.rope_original_context, 32);

  // No original context: the trained one; an attention factor multiplies in.
  TinyModel scaled;
  scaled.extra_strings = {{"rope.scaling.type", "yarn"}};
  scaled.extra_floats = {{"rope.scaling.factor", 4.0f}, {"rope.scaling.attn_factor", 0.5f}};
  model = Load(scaled.Build());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->config().rope_original_context, 256);
  EXPECT_NEAR((*model)->config().rope_attn_factor, 0.5f, 1e-6f);
}

// phi3: fused QKV and gate/up; LongRoPE's long factors when the context (256) exceeds the
// original one, the short ones otherwise; rope.scaling.attn_factor scales cos and sin.
TEST(ModelLoadTest, Phi3FusedMatricesAndLongRopeFactorsByTheConfiguredContext) {
  TinyModel phi3;
  phi3.arch = "phi3";
  phi3.fused = true;
  phi3.rope_factor_tensors = {"rope_factors_long.weight", "rope_factors_short.weight"};
  phi3.fill = 0x3f;
  phi3.extra_floats = {{"rope.scaling.attn_factor", 1.25f}};
  for (const uint32_t original : {32u, 256u}) {
    phi3.extra_u32s = {{"rope.scaling.original_context_length", original}};
    const std::vector<uint8_t> bytes = phi3.Build();
    StatusOr<std::unique_ptr<Model>> model = Load(bytes);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const ModelConfig& c = (*model)->config();
    EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
    EXPECT_FLOAT_EQ(c.rope_attn_factor, 1.25f);
    EXPECT_EQ(c.rope_ext_factor, 0.0f);
    const ModelWeights& w = (*model)->weights();
    // Views of the fused tensors' parts: Q's 32 rows, K's and V's 16 each; gate's and up's 64.
    const LayerWeights& l = w.layers[0];
    EXPECT_EQ(l.q.rows, 32);
    EXPECT_EQ(l.k.rows, 16);
    EXPECT_EQ(l.v.rows, 16);
    EXPECT_EQ(l.k.data, l.q.data + 32 * l.q.row_bytes);
    EXPECT_EQ(l.v.data, l.k.data + 16 * l.k.row_bytes);
    EXPECT_EQ(l.gate.rows, 64);
    EXPECT_EQ(l.up.data, l.gate.data + 64 * l.gate.row_bytes);
    // Both parses view the same bytes.
    const StatusOr<GgufFile> file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    const char* want = original < 256 ? "rope_factors_long.weight" : "rope_factors_short.weight";
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(w.rope_freqs.data()),
              file->FindTensor(want)->data)
        << original;
  }
}

// A file of an unknown family, a missing tensor or one of the wrong shape: the error names
// the family, the tensor and the shape it expected.
TEST(ModelLoadTest, LoadErrorsNameTheFamilyTheTensorAndTheExpectedShape) {
  TinyModel unknown;
  unknown.arch = "mamba";
  const StatusOr<std::unique_ptr<Model>> mamba = Load(unknown.Build());
  ASSERT_FALSE(mamba.ok());
  EXPECT_THAT(mamba.status().message(),
              HasSubstr("architecture 'mamba' is not supported; tokenmill runs 'llama'"));
  EXPECT_THAT(mamba.status().message(), HasSubstr("'phi3'"));

  TinyModel missing;
  missing.arch = "phi3";
  missing.fused = true;
  missing.skip_tensor = "blk.0.ffn_down.weight";
  const StatusOr<std::unique_ptr<Model>> no_down = Load(missing.Build());
  ASSERT_FALSE(no_down.ok());
  EXPECT_EQ(no_down.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(no_down.status().message(),
              HasSubstr("the phi3 model: the model has no tensor 'blk.0.ffn_down.weight' "
                        "(expected shape [64, 32])"));

  // A llama file's separate gate and up where phi3 expects them fused.
  TinyModel llama_shaped;
  llama_shaped.arch = "phi3";
  const StatusOr<std::unique_ptr<Model>> unfused = Load(llama_shaped.Build());
  ASSERT_FALSE(unfused.ok());
  EXPECT_THAT(unfused.status().message(),
              HasSubstr("the phi3 model: tensor 'blk.0.ffn_up.weight' has shape [32, 64], "
                        "expected [32, 128]"));

  TinyModel no_norm;
  no_norm.skip_tensor = "output_norm.weight";
  const StatusOr<std::unique_ptr<Model>> llama = Load(no_norm.Build());
  ASSERT_FALSE(llama.ok());
  EXPECT_THAT(llama.status().message(),
              HasSubstr("the llama model: the model has no tensor 'output_norm.weight' "
                        "(expected shape [32])"));
}

// Types the CPU does not run (IQ1-IQ3, TQ, MXFP4) are refused naming the tensor, its type and
// what is supported.
TEST(ModelLoadTest, RefusesTypesItDoesNotRunNamingTheTensorAndTheSupportedOnes) {
  for (const uint32_t id : {19u, 29u, 16u, 17u, 22u, 18u, 21u, 34u, 35u, 39u, 10u, 14u, 23u}) {
    const GgmlTypeLayout layout = *FindGgmlType(id);
    if (ToTensorType(id) && CpuComputesWith(*ToTensorType(id))) continue;  // runs now
    TinyModel tiny;
    tiny.width = 256;
    tiny.q_type = id;
    const StatusOr<std::unique_ptr<Model>> model = Load(tiny.Build());
    ASSERT_FALSE(model.ok()) << layout.name;
    EXPECT_THAT(model.status().message(),
                HasSubstr("'blk.0.attn_q.weight' has type " + std::string(layout.name) +
                          ", which tokenmill does not run (supported: " + CpuTensorTypeNames() +
                          ")"));
  }
  EXPECT_THAT(CpuTensorTypeNames(),
              HasSubstr("q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, bf16, mxfp4"));
}

// Every type the CPU runs loads as attn_q and as token_embd (whose rows the embedding
// dequantizes one per token), in the file's layout unless RegroupRows takes it (and, for the
// K-quants, RowGroupsPay on this CPU).
TEST(ModelLoadTest, LoadsEveryTypeTheCpuRunsAsAMatrixOrTheEmbedding) {
  for (TensorType type : AllTensorTypes()) {
    if (!CpuComputesWith(type)) continue;
    TinyModel tiny;
    tiny.width = LayoutOf(type).block_size == 256 ? 256 : 32;  // whole blocks per row
    tiny.q_type = static_cast<uint32_t>(type);
    tiny.embd_type = static_cast<uint32_t>(type);
    const StatusOr<std::unique_ptr<Model>> model = Load(tiny.Build());
    ASSERT_TRUE(model.ok()) << NameOf(type) << ": " << model.status().ToString();
    const ModelWeights& cpu = (*model)->cpu_weights();
    EXPECT_EQ(cpu.layers[0].q.type, type);
    EXPECT_EQ(cpu.token_embd.type, type);
    EXPECT_EQ(cpu.token_embd.layout, WeightLayout::kRows);
    // The K-quants' row groups only where the CPU's kernels run them faster (VNNI).
    const bool k_quant_groups = (type == TensorType::kQ4_K || type == TensorType::kQ5_K ||
                                 type == TensorType::kQ6_K) &&
                                BestCpuIsa() == CpuIsa::kAvx512Vnni;
    const bool regrouped = type == TensorType::kQ4_1 || type == TensorType::kQ8_0 ||
                           type == TensorType::kQ5_0 || k_quant_groups;
    EXPECT_EQ(cpu.layers[0].q.layout,
              regrouped ? WeightLayout::kRowGroups16 : WeightLayout::kRows)
        << NameOf(type);
  }
}

// Norms in f16 or bf16 are converted to f32 once, at load; f32 ones stay views of the file.
TEST(ModelLoadTest, ConvertsF16AndBf16NormsToF32) {
  for (const uint32_t type : {kF16, kBF16}) {
    TinyModel tiny;
    tiny.norm_type = type;
    tiny.fill = 0x3c;  // every element 0x3c3c: 1.05859375 in f16, ~0.0115 in bf16
    const std::vector<uint8_t> bytes = tiny.Build();
    const StatusOr<std::unique_ptr<Model>> model = Load(bytes);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const std::span<const float> norm = (*model)->weights().layers[0].attn_norm;
    ASSERT_EQ(norm.size(), 32u);
    const float want = type == kF16 ? HalfToFloat(0x3c3c) : Bf16ToFloat(0x3c3c);
    for (float v : norm) EXPECT_EQ(v, want);
    EXPECT_FALSE(reinterpret_cast<const uint8_t*>(norm.data()) >= bytes.data() &&
                 reinterpret_cast<const uint8_t*>(norm.data()) < bytes.data() + bytes.size());
    // The CPU's copy of the weights points at the same converted values.
    EXPECT_EQ((*model)->cpu_weights().layers[0].attn_norm.data(), norm.data());
  }
  TinyModel quantized_norm;
  quantized_norm.norm_type = kQ8_0;
  const StatusOr<std::unique_ptr<Model>> refused = Load(quantized_norm.Build());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("'blk.0.attn_norm.weight' has type q8_0; tokenmill needs norms and "
                        "biases in f32, f16 or bf16"));
}

}  // namespace
}  // namespace tokenmill
