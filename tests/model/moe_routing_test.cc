// RouteToken (model/arch/moe.h) against llama.cpp's routing of the tiny mixture-of-experts
// models, captured from its graph by tests/reference/make_moe_routing_golden.py: the same
// experts in the same order, ties included, and the same weights bit for bit. And the
// grouping of a step's choices by expert.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/arch/moe.h"
#include "tests/test_paths.h"

namespace tokenmill {
namespace {

nlohmann::json LoadGolden() {
  std::ifstream in(TestDataDir() + "/moe/routing.json");
  EXPECT_TRUE(in.good()) << "run tests/reference/make_moe_routing_golden.py";
  return nlohmann::json::parse(in);
}

class MoeRoutingGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeRoutingGolden, ExpertsAndWeightsEqualLlamaCpps) {
  const nlohmann::json golden = LoadGolden();
  const nlohmann::json& model = golden["models"][GetParam()];
  ExpertConfig c;
  c.n_expert = model["n_expert"];
  c.n_used = model["n_used"];
  c.gating = ExpertGating::kSoftmax;
  c.normalize = model["normalize"];
  ASSERT_GT(model["cases"].size(), 0u);
  int index = 0;
  for (const nlohmann::json& item : model["cases"]) {
    std::vector<float> logits = item["logits"].get<std::vector<float>>();
    std::vector<int32_t> experts(c.n_used);
    std::vector<float> weights(c.n_used);
    RouteToken(c, logits, experts, weights);
    EXPECT_EQ(experts, item["experts"].get<std::vector<int32_t>>()) << "case " << index;
    EXPECT_EQ(weights, item["weights"].get<std::vector<float>>()) << "case " << index;
    ++index;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyFamilies, MoeRoutingGolden,
                         ::testing::Values("qwen3moe", "qwen2moe", "mixtral"));

TEST(MoeRoutingGolden, QwenCasesEndOnTies) {
  // The golden must keep testing ties: qwen3moe's router rows come in equal pairs.
  EXPECT_EQ(LoadGolden()["models"]["qwen3moe"]["ties_at_the_edge"],
            LoadGolden()["models"]["qwen3moe"]["cases"].size());
}

TEST(RouteToken, SigmoidGatingScalesAndClampsTheSum) {
  ExpertConfig c{.n_expert = 4, .n_used = 2, .gating = ExpertGating::kSigmoid,
                 .normalize = true, .scale = 2.5f};
  std::vector<float> logits = {0.0f, 3.0f, -1.0f, 1.0f};
  std::vector<int32_t> experts(2);
  std::vector<float> weights(2);
  RouteToken(c, logits, experts, weights);
  EXPECT_EQ(experts, (std::vector<int32_t>{1, 3}));
  const float p1 = 1.0f / (1.0f + std::exp(-3.0f)), p3 = 1.0f / (1.0f + std::exp(-1.0f));
  const float sum = static_cast<float>(static_cast<double>(p1) + static_cast<double>(p3));
  EXPECT_EQ(weights[0], p1 / sum * 2.5f);
  EXPECT_EQ(weights[1], p3 / sum * 2.5f);
  // Weights summing to almost nothing are divided by f16's smallest normal instead.
  logits = {-30.0f, -31.0f, -40.0f, -40.0f};
  RouteToken(c, logits, experts, weights);
  EXPECT_EQ(weights[0], 1.0f / (1.0f + std::exp(30.0f)) / 6.103515625e-5f * 2.5f);
}

TEST(RouteToken, GroupLimitedRoutingChoosesByTheBiasedProbsAndWeighsByTheProbs) {
  // DeepSeek-V3's routing: 8 experts in 4 groups of 2, the 2 groups of the largest top-2 sums
  // kept, top 3 by prob + bias, weighted by the probs alone, renormalized and scaled.
  ExpertConfig c{.n_expert = 8, .n_used = 3, .gating = ExpertGating::kSigmoid,
                 .normalize = true, .scale = 2.5f, .n_groups = 4, .n_groups_used = 2};
  std::vector<float> logits = {3.0f, -3.0f, 1.0f, 0.9f, 0.5f, 0.4f, -1.0f, 2.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.2f, 0.0f, -0.5f};
  std::vector<float> p;
  for (float x : logits) p.push_back(1.0f / (1.0f + std::exp(-x)));
  std::vector<int32_t> experts(3);
  std::vector<float> weights(3);
  RouteToken(c, logits, experts, weights, bias);
  // Group 0 holds the most probable expert (0) but sums 1.0 with its partner; groups 1 (1.44)
  // and 2 (0.62 + 0.80 biased) are kept, group 3 (0.27 + 0.38 biased) is not. Expert 5 leads on
  // its bias; its weight is its unbiased prob.
  EXPECT_EQ(experts, (std::vector<int32_t>{5, 2, 3}));
  const float sum = static_cast<float>(static_cast<double>(p[5]) + static_cast<double>(p[2]) +
                                       static_cast<double>(p[3]));
  EXPECT_EQ(weights, (std::vector<float>{p[5] / sum * 2.5f, p[2] / sum * 2.5f,
                                         p[3] / sum * 2.5f}));
  // Without groups, expert 0 and the biased 7 take part.
  c.n_groups = 0;
  logits = {3.0f, -3.0f, 1.0f, 0.9f, 0.5f, 0.4f, -1.0f, 2.0f};
  RouteToken(c, logits, experts, weights, bias);
  EXPECT_EQ(experts, (std::vector<int32_t>{0, 5, 2}));
}

TEST(RouteToken, SoftmaxOverTheSelectedLogits) {
  // gpt-oss: the top k chosen on the raw logits, then their softmax.
  ExpertConfig c{.n_expert = 5, .n_used = 2, .gating = ExpertGating::kSoftmaxSelected};
  std::vector<float> logits = {1.0f, 4.0f, 2.0f, 4.0f, -3.0f};
  std::vector<int32_t> experts(2);
  std::vector<float> weights(2);
  RouteToken(c, logits, experts, weights);
  EXPECT_EQ(experts, (std::vector<int32_t>{1, 3}));  // the tie in index order
  EXPECT_EQ(weights, (std::vector<float>{0.5f, 0.5f}));
}

TEST(ExpertGroups, GroupsChoicesByExpertInTokenOrder) {
  // Three tokens, two choices each.
  const std::vector<int32_t> experts = {2, 0, 0, 3, 2, 3};
  ExpertGroups g;
  g.Build(experts, 5);
  EXPECT_EQ(g.begin, (std::vector<int32_t>{0, 2, 2, 4, 6, 6}));
  EXPECT_EQ(g.order, (std::vector<int32_t>{1, 2, 0, 4, 3, 5}));
  EXPECT_EQ(g.size(1), 0);
  EXPECT_EQ(g.size(4), 0);
}

}  // namespace
}  // namespace tokenmill
