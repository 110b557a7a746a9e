// PlanCudaGraph on the CPU (label unit): what the CUDA pass runs of each family's graph,
// stated here from the family files (model/arch/*.cc), and the refusals by name.
#include "model/cuda/cuda_graph_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace tokenmill::cuda {
namespace {

ModelConfig Config(const std::string& arch, int n_layers) {
  ModelConfig c;
  c.arch_name = arch;
  c.n_layers = n_layers;
  c.n_embd = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.n_rot = 32;
  c.rope_freq_base = 10000.0f;
  return c;
}

TEST(CudaGraphPlanTest, LlamaIsTheBaseGraph) {
  auto plan = PlanCudaGraph(Config("llama", 3));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->embed_scale, 1.0f);
  EXPECT_FALSE(plan->head_norms);
  EXPECT_FALSE(plan->post_norms);
  EXPECT_FALSE(plan->gelu);
  EXPECT_EQ(plan->query_scale, 0.0f);
  ASSERT_EQ(plan->rope_bases.size(), 1u);
  ASSERT_EQ(plan->layers.size(), 3u);
  for (const CudaLayerPlan& l : plan->layers) {
    EXPECT_EQ(l.rope_table, 0);
    EXPECT_EQ(l.sliding_window, 0);
  }
}

TEST(CudaGraphPlanTest, Qwen3NormsTheHeads) {
  auto plan = PlanCudaGraph(Config("qwen3", 2));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->head_norms);
  EXPECT_FALSE(plan->gelu);
  EXPECT_EQ(plan->query_scale, 0.0f);
}

TEST(CudaGraphPlanTest, GemmaScalesEmbeddingsAndQueriesAndGatesWithGelu) {
  auto plan = PlanCudaGraph(Config("gemma", 2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->embed_scale, std::sqrt(64.0f));
  EXPECT_TRUE(plan->gelu);
  EXPECT_FALSE(plan->head_norms);
  EXPECT_FALSE(plan->post_norms);
  EXPECT_EQ(plan->query_scale, 1.0f / std::sqrt(32.0f));
}

TEST(CudaGraphPlanTest, Gemma2SlidesEvenLayersAndCapsScores) {
  ModelConfig c = Config("gemma2", 4);
  c.sliding_window = 6;
  c.sliding_layers = {true, false, true, false};
  c.attn_softcap = 2.0f;
  c.final_softcap = 5.0f;
  for (int i = 0; i < 4; ++i) c.rope_layers.push_back({10000.0f, 1.0f});
  auto plan = PlanCudaGraph(c);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->post_norms);
  EXPECT_FALSE(plan->head_norms);
  EXPECT_EQ(plan->attn_softcap, 2.0f);
  EXPECT_EQ(plan->final_softcap, 5.0f);
  EXPECT_EQ(plan->query_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_EQ(plan->rope_bases.size(), 1u);  // the same base twice is one table
  const int want[] = {6, 0, 6, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan->layers[i].sliding_window, want[i]) << i;
  // The 27B (46 layers) scales Q by 1 / sqrt(n_embd / n_head), not 1 / sqrt(head_dim).
  c = Config("gemma2", 46);
  c.n_embd = 4608;
  c.n_heads = 32;
  c.head_dim = 128;
  plan = PlanCudaGraph(c);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->query_scale, 1.0f / std::sqrt(144.0f));
}

TEST(CudaGraphPlanTest, Gemma3GivesEachBaseATableAndScalesOnlyTheGlobalLayers) {
  ModelConfig c = Config("gemma3", 7);
  c.rope_freq_base = 1e6f;
  c.rope_position_scale = 0.5f;
  c.sliding_window = 8;
  c.sliding_layers = {true, true, true, true, true, false, true};
  for (int i = 0; i < 7; ++i) {
    c.rope_layers.push_back(c.sliding_layers[i] ? ModelConfig::LayerRope{10000.0f, 1.0f}
                                                : ModelConfig::LayerRope{1e6f, 0.5f});
  }
  auto plan = PlanCudaGraph(c);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->head_norms);
  EXPECT_TRUE(plan->post_norms);
  EXPECT_TRUE(plan->gelu);
  EXPECT_EQ(plan->attn_softcap, 0.0f);
  ASSERT_EQ(plan->rope_bases.size(), 2u);
  EXPECT_EQ(plan->rope_bases[0], 10000.0f);
  EXPECT_EQ(plan->rope_bases[1], 1e6f);
  for (int i = 0; i < 7; ++i) {
    const CudaLayerPlan& l = plan->layers[i];
    const bool global = i == 5;
    EXPECT_EQ(l.rope_table, global ? 1 : 0) << i;
    EXPECT_EQ(l.rope.freq_base, global ? 1e6f : 10000.0f) << i;
    EXPECT_EQ(l.rope.position_scale, global ? 0.5f : 1.0f) << i;
    EXPECT_EQ(l.sliding_window, global ? 0 : 8) << i;
    EXPECT_TRUE(l.rope.freq_factors.empty());
  }
}

ModelConfig WithExperts(ModelConfig c, int n_expert, int n_used) {
  c.experts.n_expert = n_expert;
  c.experts.n_used = n_used;
  c.experts.n_ff_exp = 32;
  return c;
}

TEST(CudaGraphPlanTest, MixturesOfExpertsRunTheirFamiliesAttention) {
  // Mixtral: llama's graph with experts.
  auto mixtral = PlanCudaGraph(WithExperts(Config("llama", 2), 8, 2));
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().ToString();
  EXPECT_TRUE(mixtral->experts);
  EXPECT_FALSE(mixtral->head_norms);
  EXPECT_FALSE(mixtral->gelu);
  // qwen3moe: qwen3's head norms.
  auto qwen3moe = PlanCudaGraph(WithExperts(Config("qwen3moe", 2), 16, 3));
  ASSERT_TRUE(qwen3moe.ok()) << qwen3moe.status().ToString();
  EXPECT_TRUE(qwen3moe->experts);
  EXPECT_TRUE(qwen3moe->head_norms);
  EXPECT_EQ(qwen3moe->layers.size(), 2u);
  // qwen2moe: qwen2's attention (its biases come from the config's qkv_bias).
  ModelConfig qwen2moe = WithExperts(Config("qwen2moe", 2), 12, 4);
  qwen2moe.experts.n_ff_shexp = 96;
  auto plan = PlanCudaGraph(qwen2moe);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->experts);
  EXPECT_FALSE(plan->head_norms);
  // A dense llama is not one.
  EXPECT_FALSE(PlanCudaGraph(Config("llama", 2))->experts);
}

TEST(CudaGraphPlanTest, OtherFamiliesAndExpertsAreRefusedByName) {
  // gpt-oss: MXFP4 experts, attention sinks, biases and its clamped SwiGLU are not on CUDA.
  auto gpt_oss = PlanCudaGraph(WithExperts(Config("gpt-oss", 2), 32, 4));
  ASSERT_EQ(gpt_oss.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(gpt_oss.status().message().find("not 'gpt-oss': use --device cpu"),
            std::string::npos);
  // mistral3's attention temperature and the file's YaRN betas are not in the CUDA pass.
  auto mistral3 = PlanCudaGraph(Config("mistral3", 2));
  ASSERT_EQ(mistral3.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(mistral3.status().message().find("not 'mistral3': use --device cpu"),
            std::string::npos);
  // Experts in a dense family's graph other than llama's.
  auto qwen3 = PlanCudaGraph(WithExperts(Config("qwen3", 2), 8, 2));
  ASSERT_EQ(qwen3.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(qwen3.status().message().find("'qwen3'"), std::string::npos);
  EXPECT_NE(qwen3.status().message().find("use --device cpu"), std::string::npos);
  // A MoE family without experts is a malformed config.
  EXPECT_EQ(PlanCudaGraph(Config("qwen3moe", 2)).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tokenmill::cuda
