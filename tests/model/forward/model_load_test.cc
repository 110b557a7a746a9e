// Model config and weights from GGUF metadata: what is read, and what is refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model.h"
#include "tests/gguf/gguf_builder.h"

namespace tokenmill {
namespace {

using ::testing::HasSubstr;
using testing::GgufBuilder;

constexpr uint32_t kF32 = 0, kQ4_1 = 3, kQ5_0 = 6, kQ8_0 = 8;

std::vector<uint8_t> Zeros(size_t bytes) { return std::vector<uint8_t>(bytes, 0); }

// A one-layer model of width 32 (2 heads of 16, 1 KV head, vocabulary 8), every tensor f32
// except attn_q, whose ggml type is `q_type` (bytes per 32 elements: `q_block_bytes`).
struct TinyModel {
  std::string arch = "llama";
  uint32_t q_type = kF32;
  size_t q_block_bytes = 128;
  bool qkv_bias = false;
  bool rope_freqs = false;
  bool output = false;
  std::vector<std::pair<std::string, std::string>> extra_strings;
  std::vector<std::pair<std::string, float>> extra_floats;

  std::vector<uint8_t> Build() const {
    GgufBuilder b;
    const std::string p = arch + ".";
    b.KeyString("general.architecture", arch)
        .KeyU32(p + "block_count", 1)
        .KeyU32(p + "embedding_length", 32)
        .KeyU32(p + "attention.head_count", 2)
        .KeyU32(p + "attention.head_count_kv", 1)
        .KeyU32(p + "feed_forward_length", 64)
        .KeyU32(p + "context_length", 256)
        .KeyF32(p + "attention.layer_norm_rms_epsilon", 1e-6f)
        .KeyF32(p + "rope.freq_base", 500000.0f);
    for (const auto& [k, v] : extra_strings) b.KeyString(p + k, v);
    for (const auto& [k, v] : extra_floats) b.KeyF32(p + k, v);
    auto f32 = [&](const std::string& name, std::vector<uint64_t> shape) {
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      b.Tensor(name, kF32, shape, Zeros(n * 4));
    };
    f32("token_embd.weight", {32, 8});
    f32("output_norm.weight", {32});
    if (output) f32("output.weight", {32, 8});
    if (rope_freqs) f32("rope_freqs.weight", {8});
    f32("blk.0.attn_norm.weight", {32});
    b.Tensor("blk.0.attn_q.weight", q_type, {32, 32}, Zeros(32 * q_block_bytes));
    f32("blk.0.attn_k.weight", {32, 16});
    f32("blk.0.attn_v.weight", {32, 16});
    if (qkv_bias) {
      f32("blk.0.attn_q.bias", {32});
      f32("blk.0.attn_k.bias", {16});
      f32("blk.0.attn_v.bias", {16});
    }
    f32("blk.0.attn_output.weight", {32, 32});
    f32("blk.0.ffn_norm.weight", {32});
    f32("blk.0.ffn_gate.weight", {32, 64});
    f32("blk.0.ffn_up.weight", {32, 64});
    f32("blk.0.ffn_down.weight", {64, 32});
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
  tiny.q_block_bytes = 20;
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
  tiny.q_block_bytes = 34;
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

  TinyModel q5_model;
  q5_model.q_type = kQ5_0;
  q5_model.q_block_bytes = 22;
  const StatusOr<std::unique_ptr<Model>> q5 = Load(q5_model.Build());
  ASSERT_FALSE(q5.ok());
  EXPECT_THAT(q5.status().message(), HasSubstr("'blk.0.attn_q.weight' has type q5_0"));

  TinyModel yarn;
  yarn.extra_strings = {{"rope.scaling.type", "yarn"}};
  const StatusOr<std::unique_ptr<Model>> yarn_model = Load(yarn.Build());
  ASSERT_FALSE(yarn_model.ok());
  EXPECT_THAT(yarn_model.status().message(), HasSubstr("RoPE scaling 'yarn'"));
}

}  // namespace
}  // namespace tokenmill
