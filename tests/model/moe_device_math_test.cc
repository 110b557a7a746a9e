// The CUDA mixture-of-experts arithmetic (kernels/cuda/moe_math.h), on the CPU: the device's
// routing against RouteToken (model/arch/moe.h) and llama.cpp's captured routing, its grouping
// against ExpertGroups::Build, its weighted sum against the CPU's loop (blocks_moe.cc). The gpu
// tests (tests/kernels/cuda/cuda_kernels_test.cc) hold the kernels to these emulations bit for
// bit.
//
// The bound: none. RouteToken takes e^x from GgmlVectorExpf for a softmax's full 8-float
// vectors and from std::exp (glibc's expf) for its tail and the sigmoid; the device's
// RoutingExpf and GlibcExpf are those two functions operation for operation, so probs and
// weights are equal bit for bit and ties in logits stay ties (or not) as on the CPU. Ties in
// probs fall to the lower index, as RouteToken's stable sort of up to 16 experts puts them.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/moe_math.h"
#include "model/arch/moe.h"
#include "tests/test_paths.h"

namespace tokenmill {
namespace {

using cuda::DeviceRouting;
using cuda::RoutingGating;

DeviceRouting ToDevice(const ExpertConfig& c, const std::vector<float>& bias = {}) {
  return DeviceRouting{c.n_expert,     c.n_used,
                       static_cast<RoutingGating>(c.gating),
                       c.normalize,    c.scale,
                       bias.empty() ? nullptr : bias.data(),
                       c.n_groups,     c.n_groups_used};
}

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed OnCpu(const ExpertConfig& c, std::vector<float> logits,
             const std::vector<float>& bias = {}) {
  Routed r{std::vector<int32_t>(c.n_used), std::vector<float>(c.n_used)};
  RouteToken(c, logits, r.experts, r.weights, bias);
  return r;
}

Routed OnDevice(const ExpertConfig& c, std::vector<float> logits,
                const std::vector<float>& bias = {}) {
  Routed r{std::vector<int32_t>(c.n_used), std::vector<float>(c.n_used)};
  cuda::RouteTokenOnDevice(ToDevice(c, bias), logits.data(), r.experts.data(),
                           r.weights.data());
  return r;
}

void ExpectWeightsEqual(const Routed& device, const Routed& cpu, const std::string& what) {
  for (size_t k = 0; k < cpu.weights.size(); ++k) {
    EXPECT_EQ(std::bit_cast<uint32_t>(device.weights[k]), std::bit_cast<uint32_t>(cpu.weights[k]))
        << what << " choice " << k << ": " << device.weights[k] << " vs " << cpu.weights[k];
  }
}

TEST(RoutingExpf, EqualsGgmlVectorExpfBitForBit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> any(-110.0f, 90.0f);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, 88.7f, -87.0f, -103.0f, -150.0f,
                           -200.0f, 100.0f, 1e-20f, -1e-20f};
  for (int i = 0; i < 200000; ++i) xs.push_back(any(rng));
  for (float x : xs) {
    const float a = cuda::RoutingExpf(x), b = GgmlVectorExpf(x);
    EXPECT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << "x = " << x;
  }
}

TEST(GlibcExpf, EqualsStdExp) {
  // Every 13th float in [-2^-20, -104] (the router softmax's x - max) a stride apart, and random
  // ones over the sigmoid's range.
  int64_t checked = 0;
  for (uint32_t bits = 0xb5800000u; bits <= 0xc2d00000u; bits += 13) {
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(std::bit_cast<uint32_t>(cuda::GlibcExpf(x)), std::bit_cast<uint32_t>(std::exp(x)))
        << "x = " << x;
    ++checked;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> any(-120.0f, 100.0f);
  for (int i = 0; i < 2000000; ++i) {
    const float x = any(rng);
    ASSERT_EQ(std::bit_cast<uint32_t>(cuda::GlibcExpf(x)), std::bit_cast<uint32_t>(std::exp(x)))
        << "x = " << x;
  }
  for (float x : {0.0f, -0.0f, -INFINITY, INFINITY, 89.0f, -104.0f, -200.0f}) {
    EXPECT_EQ(std::bit_cast<uint32_t>(cuda::GlibcExpf(x)), std::bit_cast<uint32_t>(std::exp(x)))
        << "x = " << x;
  }
  EXPECT_TRUE(std::isnan(cuda::GlibcExpf(NAN)));
  EXPECT_GT(checked, 10000000);
}

TEST(RouteTokenOnDevice, EqualsRouteTokenOnRandomLogits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  const std::vector<ExpertConfig> gatings = {
      {.gating = ExpertGating::kSoftmax, .normalize = true},
      {.gating = ExpertGating::kSoftmax, .normalize = false},
      {.gating = ExpertGating::kSoftmax, .normalize = true, .scale = 2.5f},
      {.gating = ExpertGating::kSigmoid, .normalize = true, .scale = 1.5f},
      {.gating = ExpertGating::kSigmoid, .normalize = false},
      {.gating = ExpertGating::kSoftmaxSelected, .normalize = false}};
  for (ExpertConfig c : gatings) {
    for (int n_expert : {4, 8, 12, 16, 32, 60, 128}) {
      for (int n_used : {1, 2, 3, 4, 8}) {
        if (n_used > n_expert) continue;
        c.n_expert = n_expert;
        c.n_used = n_used;
        for (int token = 0; token < 50; ++token) {
          std::vector<float> logits(n_expert);
          for (float& x : logits) x = logit(rng);
          const Routed cpu = OnCpu(c, logits), device = OnDevice(c, logits);
          const std::string what = "gating " + std::to_string(static_cast<int>(c.gating)) +
                                   ", " + std::to_string(n_expert) + " experts, top-" +
                                   std::to_string(n_used);
          ASSERT_EQ(device.experts, cpu.experts) << what;
          ExpectWeightsEqual(device, cpu, what);
        }
      }
    }
  }
}

// Ties fall to the lower index, as RouteToken's (stable, up to 16 experts) sort puts them:
// pairs of equal logits (the tiny qwen3moe's router), a tie across the top-k edge, all equal.
TEST(RouteTokenOnDevice, TiesFallAsRouteTokensUpTo16Experts) {
  std::mt19937 rng(13);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  int cases = 0;
  for (int n_expert : {4, 6, 8, 12, 16}) {
    for (int n_used = 1; n_used <= std::min(n_expert, 8); ++n_used) {
      for (ExpertGating gating : {ExpertGating::kSoftmax, ExpertGating::kSigmoid,
                                  ExpertGating::kSoftmaxSelected}) {
        const ExpertConfig c{.n_expert = n_expert, .n_used = n_used, .gating = gating,
                             .normalize = true};
        for (int token = 0; token < 20; ++token) {
          std::vector<float> logits(n_expert);
          for (int i = 0; i < n_expert; i += 2) {  // tied pairs, in shuffled places
            logits[i] = logit(rng);
            if (i + 1 < n_expert) logits[i + 1] = logits[i];
          }
          std::shuffle(logits.begin(), logits.end(), rng);
          if (token % 5 == 0) std::fill(logits.begin(), logits.end(), 0.5f);
          if (token % 5 == 1) {  // several equal to the k-th largest
            std::vector<float> sorted = logits;
            std::sort(sorted.rbegin(), sorted.rend());
            for (float& x : logits) x = x < sorted[n_used - 1] ? sorted[n_used - 1] : x;
          }
          const Routed cpu = OnCpu(c, logits), device = OnDevice(c, logits);
          ASSERT_EQ(device.experts, cpu.experts) << n_expert << " experts, top-" << n_used;
          ExpectWeightsEqual(device, cpu, "tied");
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

// Past 16 experts RouteToken's std::sort may order exact ties otherwise; the device's order is
// still the stable one: the n_used first of the experts stably sorted by descending prob.
TEST(RouteTokenOnDevice, TiesPast16ExpertsFallToTheLowerIndex) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> level(0, 5);
  const ExpertConfig c{.n_expert = 64, .n_used = 8, .gating = ExpertGating::kSoftmax,
                       .normalize = true};
  for (int token = 0; token < 100; ++token) {
    std::vector<float> logits(c.n_expert);
    for (float& x : logits) x = 0.5f * static_cast<float>(level(rng));
    std::vector<float> probs = logits;
    SoftmaxRowLikeGgml(probs);
    std::vector<int32_t> stable(c.n_expert);
    std::iota(stable.begin(), stable.end(), 0);
    std::stable_sort(stable.begin(), stable.end(),
                     [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
    stable.resize(c.n_used);
    EXPECT_EQ(OnDevice(c, logits).experts, stable);
  }
}

// DeepSeek's routing: the selection bias (exp_probs_b) for choosing only, group-limited top-k
// (each group scored by its two best biased probs), with sigmoid or softmax probs; V3's shape
// (256 experts in 8 groups, 4 kept, top-8, renormalized x 2.5), V2's (160 in 8, 3 kept, top-6),
// the tiny deepseek2's (24 in 4, 2 kept, top-3), groups of one and of two experts.
TEST(RouteTokenOnDevice, EqualsRouteTokenWithTheSelectionBiasAndExpertGroups) {
  std::mt19937 rng(29);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::normal_distribution<float> bias_value(0.0f, 0.3f);
  struct Shape {
    int n_expert, n_used, n_groups, n_groups_used;
  };
  const std::vector<Shape> shapes = {{256, 8, 8, 4}, {160, 6, 8, 3}, {24, 3, 4, 2},
                                     {16, 4, 16, 5}, {16, 3, 8, 2},  {64, 6, 0, 0},
                                     {12, 2, 3, 1},  {32, 4, 4, 4}};
  int cases = 0;
  for (const Shape& shape : shapes) {
    for (ExpertGating gating : {ExpertGating::kSigmoid, ExpertGating::kSoftmax}) {
      for (bool with_bias : {true, false}) {
        ExpertConfig c{.n_expert = shape.n_expert, .n_used = shape.n_used, .gating = gating,
                       .normalize = gating == ExpertGating::kSigmoid, .scale = 2.5f,
                       .n_groups = shape.n_groups, .n_groups_used = shape.n_groups_used};
        std::vector<float> bias;
        if (with_bias) {
          for (int i = 0; i < c.n_expert; ++i) bias.push_back(bias_value(rng));
        }
        for (int token = 0; token < 40; ++token) {
          std::vector<float> logits(c.n_expert);
          for (float& x : logits) x = logit(rng);
          const Routed cpu = OnCpu(c, logits, bias), device = OnDevice(c, logits, bias);
          const std::string what = std::to_string(c.n_expert) + " experts in " +
                                   std::to_string(c.n_groups) + " groups, gating " +
                                   std::to_string(static_cast<int>(gating)) +
                                   (with_bias ? ", biased" : "");
          ASSERT_EQ(device.experts, cpu.experts) << what;
          ExpectWeightsEqual(device, cpu, what);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 8 * 2 * 2 * 40);
}

// Tied groups and tied experts within them (up to 16 of each, where RouteToken's sort is
// stable): the lower group, then the lower expert, as RouteToken.
TEST(RouteTokenOnDevice, TiedGroupsFallAsRouteTokens) {
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> level(0, 3);
  const ExpertConfig c{.n_expert = 16, .n_used = 3, .gating = ExpertGating::kSoftmaxSelected,
                       .normalize = true, .n_groups = 8, .n_groups_used = 3};
  for (int token = 0; token < 300; ++token) {
    std::vector<float> logits(c.n_expert), bias(c.n_expert);
    for (float& x : logits) x = 0.25f * static_cast<float>(level(rng));
    for (float& x : bias) x = token % 2 == 0 ? 0.0f : 0.125f * static_cast<float>(level(rng));
    const Routed cpu = OnCpu(c, logits, bias), device = OnDevice(c, logits, bias);
    ASSERT_EQ(device.experts, cpu.experts) << "token " << token;
    ExpectWeightsEqual(device, cpu, "tied groups");
  }
}

TEST(RouteTokenOnDevice, MatchesLlamaCppsCapturedRouting) {
  std::ifstream in(TestDataDir() + "/moe/routing.json");
  ASSERT_TRUE(in.good()) << "run tests/reference/make_moe_routing_golden.py";
  const nlohmann::json golden = nlohmann::json::parse(in);
  for (const char* name : {"qwen3moe", "qwen2moe", "mixtral"}) {
    const nlohmann::json& model = golden["models"][name];
    const ExpertConfig c{.n_expert = model["n_expert"], .n_used = model["n_used"],
                         .gating = ExpertGating::kSoftmax, .normalize = model["normalize"]};
    ASSERT_GT(model["cases"].size(), 0u);
    for (const nlohmann::json& item : model["cases"]) {
      const Routed device = OnDevice(c, item["logits"].get<std::vector<float>>());
      EXPECT_EQ(device.experts, item["experts"].get<std::vector<int32_t>>()) << name;
      const Routed llama_cpp{item["experts"].get<std::vector<int32_t>>(),
                             item["weights"].get<std::vector<float>>()};
      ExpectWeightsEqual(device, llama_cpp, name);
    }
  }
}

// ExpertGroups::Build by the device's three steps, as GroupExpertPairsKernel runs them.
struct DeviceGrouping {
  std::vector<int32_t> begin, order, slot_of_pair;
};

DeviceGrouping GroupOnDevice(const std::vector<int32_t>& experts, int n_expert) {
  const int64_t n_pairs = static_cast<int64_t>(experts.size());
  DeviceGrouping g{std::vector<int32_t>(n_expert + 1, -1), std::vector<int32_t>(n_pairs, -1),
                   std::vector<int32_t>(n_pairs, -1)};
  for (int e = 0; e < n_expert; ++e) {
    g.begin[e + 1] = cuda::CountExpertPairs(experts.data(), n_pairs, e);
  }
  cuda::ScanExpertCounts(g.begin.data(), n_expert);
  for (int e = n_expert - 1; e >= 0; --e) {  // any order of the experts' threads
    cuda::PlaceExpertPairs(experts.data(), n_pairs, e, g.begin[e], g.order.data(),
                           g.slot_of_pair.data());
  }
  return g;
}

TEST(GroupExpertPairs, EqualsExpertGroupsBuild) {
  std::mt19937 rng(19);
  for (int n_expert : {1, 3, 8, 16, 60, 128}) {
    for (int n_used : {1, 2, 4, 8}) {
      if (n_used > n_expert) continue;
      for (int n_tokens : {1, 2, 5, 16, 33}) {
        // Each token's n_used distinct experts, as routing gives them.
        std::vector<int32_t> experts;
        std::vector<int32_t> all(n_expert);
        std::iota(all.begin(), all.end(), 0);
        for (int t = 0; t < n_tokens; ++t) {
          std::shuffle(all.begin(), all.end(), rng);
          experts.insert(experts.end(), all.begin(), all.begin() + n_used);
        }
        ExpertGroups cpu;
        cpu.Build(experts, n_expert);
        const DeviceGrouping device = GroupOnDevice(experts, n_expert);
        ASSERT_EQ(device.begin, cpu.begin);
        ASSERT_EQ(device.order, cpu.order);
        for (size_t slot = 0; slot < device.order.size(); ++slot) {
          ASSERT_EQ(device.slot_of_pair[device.order[slot]], static_cast<int32_t>(slot));
        }
        for (int e = 0; e < n_expert; ++e) {  // no group is larger than the tokens
          ASSERT_LE(device.begin[e + 1] - device.begin[e], n_tokens);
        }
      }
    }
  }
}

TEST(CombineExperts, EqualsTheCpusWeightedSumAndSharedExpert) {
  std::mt19937 rng(23);
  std::normal_distribution<float> value(0.0f, 1.0f);
  const int n_tokens = 7, n_used = 3, d = 40, n_expert = 5;
  std::vector<int32_t> experts;
  for (int t = 0; t < n_tokens; ++t) {
    for (int c = 0; c < n_used; ++c) experts.push_back((t + 2 * c) % n_expert);
  }
  const DeviceGrouping g = GroupOnDevice(experts, n_expert);
  std::vector<float> expert_out(experts.size() * d), weights(experts.size());
  std::vector<float> shared(n_tokens * d), gate(n_tokens);
  for (float& x : expert_out) x = value(rng);
  for (float& x : weights) x = std::fabs(value(rng));
  for (float& x : shared) x = value(rng);
  for (float& x : gate) x = 2.0f * value(rng);
  for (int t = 0; t < n_tokens; ++t) {
    const float shared_gate = gate[t] / (1.0f + std::exp(-gate[t])) / gate[t];  // blocks_moe.cc
    for (int j = 0; j < d; ++j) {
      float cpu = 0.0f;
      for (int c = 0; c < n_used; ++c) {
        const float weighted =
            expert_out[g.slot_of_pair[t * n_used + c] * d + j] * weights[t * n_used + c];
        cpu = c == 0 ? weighted : cpu + weighted;
      }
      const float device =
          cuda::CombineExperts(expert_out.data(), weights.data(), g.slot_of_pair.data(), t,
                               n_used, d, j);
      ASSERT_EQ(device, cpu) << "token " << t << " element " << j;
      const float with_shared = device + cuda::MulRounded(shared[t * d + j],
                                                          cuda::SharedExpertGate(gate[t]));
      ASSERT_EQ(with_shared, cpu + shared[t * d + j] * shared_gate);
      // deepseek2's ungated shared experts: added as they are (CombineKernel's other branch).
      ASSERT_EQ(device + shared[t * d + j], cpu + shared[t * d + j]);
    }
  }
}

}  // namespace
}  // namespace tokenmill
