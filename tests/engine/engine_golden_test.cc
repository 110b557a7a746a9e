// The engine's greedy output against llama.cpp's golden continuations
// (tests/data/logits/, written by tests/reference/make_logits_golden.py), with all twelve
// prompts of each model submitted at once so they run batched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "tests/engine/engine_test_util.h"
#include "tests/model/forward/golden.h"

namespace tokenmill::testing {
namespace {

// As in tests/model/forward (see the reason for 0.35 there): a gap between llama.cpp's two
// best logits below this is a near-tie that a different valid rounding may flip.
constexpr float kNearTie = 0.35f;

struct GoldenCase {
  std::string stem;
  std::string model_file;
  int min_identical;  // of 12; the forward pass alone reaches the same counts
};

std::ostream& operator<<(std::ostream& os, const GoldenCase& c) { return os << c.stem; }

class EngineGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(EngineGoldenTest, BatchedGreedyContinuationsMatchLlamaCpp) {
  const Golden golden = LoadGolden(GetParam().stem);
  const TestModel& model = LoadTestModel(GetParam().model_file);
  EngineConfig config = SmallConfig(256);
  config.num_threads = 2;
  auto engine = Engine::Create(*model.model, *model.tokenizer, config);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();

  std::vector<std::unique_ptr<OutputStream>> streams;
  for (const GoldenPrompt& p : golden.prompts) {
    // The text tokenizes to llama.cpp's ids.
    auto ids = model.tokenizer->Encode(p.text);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(*ids, p.prompt_tokens) << p.text;
    streams.push_back(std::make_unique<OutputStream>());
    GenerateRequest request = Greedy(p.prompt_tokens, static_cast<int>(p.continuation.size()),
                                     streams.back()->Sink(), /*ignore_eos=*/false);
    ASSERT_TRUE((*engine)->Submit(std::move(request)).ok());
  }
  int identical = 0;
  for (size_t i = 0; i < golden.prompts.size(); ++i) {
    const GoldenPrompt& p = golden.prompts[i];
    Collected c;
    while (!c.finished) Accumulate(c, streams[i]->Next());
    if (c.token_ids == p.continuation) {
      ++identical;
      EXPECT_EQ(c.final_event.finish_reason, CompletionReason::kLength);
      continue;
    }
    // The first divergence must be at a near-tie of llama.cpp's logits.
    const auto [ours, theirs] =
        std::mismatch(c.token_ids.begin(), c.token_ids.end(), p.continuation.begin());
    ASSERT_NE(ours, c.token_ids.end()) << "stopped early: '" << p.text << "'";
    const size_t at = static_cast<size_t>(ours - c.token_ids.begin());
    const float gap = LlamaCppGap(p, at, *ours);
    std::cout << GetParam().stem << ": '" << p.text << "' diverges at generated token " << at
              << " by " << gap << " (near-tie below " << kNearTie << ")\n";
    EXPECT_LT(gap, kNearTie) << "'" << p.text << "' diverges at token " << at;
  }
  std::cout << GetParam().stem << ": " << identical << " of " << golden.prompts.size()
            << " batched greedy continuations identical to llama.cpp's\n";
  EXPECT_GE(identical, GetParam().min_identical);
}

INSTANTIATE_TEST_SUITE_P(
    Models, EngineGoldenTest,
    ::testing::Values(GoldenCase{"stories260K", "stories260K.gguf", 11},
                      GoldenCase{"SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                 3}),
    [](const ::testing::TestParamInfo<GoldenCase>& param_info) {
      return TestNameOfStem(param_info.param.stem);
    });

}  // namespace
}  // namespace tokenmill::testing
