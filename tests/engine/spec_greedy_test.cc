// Speculative decoding is lossless under greedy decoding: with n-gram drafts or a draft model
// the tokens equal those of plain decoding, alone and batched, on SmolLM2; with the target as
// its own draft model every draft is accepted; the KV cache keeps its invariants after every
// step (rejected drafts roll back, drafts are never hashed) and no block is held at the end.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/speculative/draft_model_proposer.h"
#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

const std::vector<std::string>& Prompts() {
  static const std::vector<std::string> prompts = {
      // Input-grounded: the continuation repeats or edits text of the prompt.
      "Copy this list exactly.\nList: apples, bananas, cherries, dates, elderberries, figs, "
      "grapes.\nCopy: apples, bananas,",
      "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
      "def mul(a, b):\n",
      "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat",
      // Open-ended.
      "Once upon a time, in a small village by the sea,",
  };
  return prompts;
}

std::vector<TokenId> Encode(const std::string& text) {
  StatusOr<std::vector<TokenId>> ids = SmolLm2().tokenizer->Encode(text);
  TM_CHECK(ids.ok()) << ids.status().ToString();
  return *ids;
}

struct RunResult {
  std::vector<std::vector<TokenId>> tokens;  // per prompt
  EngineStats stats;
};

// All prompts on one engine: together when `batched`, else one after another. Greedy, or
// sampled at `temperature` with seed 100 + the prompt's index.
RunResult RunPrompts(const EngineConfig& config, bool batched, int max_tokens,
                     const Model* draft = nullptr, float temperature = 0.0f) {
  auto core = BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer, config, draft);
  TM_CHECK(core.ok()) << core.status().ToString();
  Collector collector;
  RunResult result;
  for (size_t i = 0; i < Prompts().size(); ++i) {
    const RequestId id = i + 1;
    GenerateRequest request = Greedy(Encode(Prompts()[i]), max_tokens, collector.Sink(id));
    request.sampling.temperature = temperature;
    request.sampling.seed = 100 + i;
    TM_CHECK((*core)->Add(id, std::move(request)).ok());
    if (!batched) TM_CHECK(RunToCompletion(**core));  // checks the invariants every step
  }
  if (batched) TM_CHECK(RunToCompletion(**core));
  for (size_t i = 0; i < Prompts().size(); ++i) {
    TM_CHECK(collector.finished(i + 1));
    result.tokens.push_back(collector[i + 1].token_ids);
  }
  result.stats = (*core)->Stats();
  const KvCacheStats kv = (*core)->kv_cache().Stats();
  EXPECT_EQ(kv.num_in_use_blocks, 0) << "blocks leaked";
  EXPECT_TRUE((*core)->kv_cache().CheckInvariants().ok());
  return result;
}

EngineConfig Config(SpecMethod method, int k = 4) {
  EngineConfig config = SmallConfig(512);
  config.num_threads = 2;
  config.spec.method = method;
  config.spec.num_speculative_tokens = k;
  return config;
}

constexpr int kMaxTokens = 40;

TEST(SpecGreedyTest, NgramEqualsPlainAloneAndBatched) {
  const RunResult plain = RunPrompts(Config(SpecMethod::kNone), /*batched=*/false, kMaxTokens);
  EXPECT_EQ(plain.stats.spec_num_drafts, 0);
  for (const bool batched : {false, true}) {
    SCOPED_TRACE(batched ? "batched" : "alone");
    const RunResult spec = RunPrompts(Config(SpecMethod::kNgram), batched, kMaxTokens);
    for (size_t i = 0; i < Prompts().size(); ++i) {
      EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << "prompt " << i;
    }
    // The input-grounded prompts must have drafted (how often depends on the greedy text:
    // 8 batched drafts since RoPE/attention follow llama.cpp) and had drafts accepted, and the
    // speculative run needed fewer forward passes than tokens.
    EXPECT_GT(spec.stats.spec_num_drafts, 5);
    EXPECT_GT(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens / 4);
    EXPECT_LE(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
    EXPECT_LT(spec.stats.num_steps, plain.stats.num_steps);
  }
}

TEST(SpecGreedyTest, TargetAsItsOwnDraftModelIsAlwaysAcceptedAndEqualsPlain) {
  constexpr int kTokens = 24;
  const RunResult plain = RunPrompts(Config(SpecMethod::kNone), /*batched=*/false, kTokens);
  for (const bool batched : {false, true}) {
    SCOPED_TRACE(batched ? "batched" : "alone");
    const RunResult spec =
        RunPrompts(Config(SpecMethod::kDraft, 3), batched, kTokens, SmolLm2().model.get());
    for (size_t i = 0; i < Prompts().size(); ++i) {
      EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << "prompt " << i;
    }
    EXPECT_GT(spec.stats.spec_num_drafts, 0);
    EXPECT_EQ(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens)
        << "a draft model equal to the target must have every draft accepted";
  }
}

// With the counter-based RNG (one uniform per output position and stream), verifying
// deterministic drafts draws exactly the tokens plain sampling draws for the same seed; a
// draft model equal to the target drafts those very tokens (q = p) and has them all
// accepted. Stronger than a distribution test, which spec_rejection_test adds for drafts
// drawn from a q unlike p.
TEST(SpecGreedyTest, SeededSamplingDrawsThePlainTokens) {
  constexpr int kTokens = 24;
  constexpr float kTemperature = 0.8f;
  const RunResult plain =
      RunPrompts(Config(SpecMethod::kNone), /*batched=*/true, kTokens, nullptr, kTemperature);
  const RunResult ngram =
      RunPrompts(Config(SpecMethod::kNgram), /*batched=*/true, kTokens, nullptr, kTemperature);
  const RunResult self_draft = RunPrompts(Config(SpecMethod::kDraft, 3), /*batched=*/true,
                                          kTokens, SmolLm2().model.get(), kTemperature);
  for (size_t i = 0; i < Prompts().size(); ++i) {
    EXPECT_EQ(ngram.tokens[i], plain.tokens[i]) << "prompt " << i;
    EXPECT_EQ(self_draft.tokens[i], plain.tokens[i]) << "prompt " << i;
  }
  EXPECT_GT(ngram.stats.spec_num_accepted_tokens, 0);
  EXPECT_GT(self_draft.stats.spec_num_draft_tokens, 0);
  EXPECT_EQ(self_draft.stats.spec_num_accepted_tokens, self_draft.stats.spec_num_draft_tokens);
}

// A prefix-cache hit serves the target's K/V of the prompt, not the draft's: the draft model
// recomputes its own, so with draft = target every draft is still accepted.
TEST(SpecGreedyTest, DraftModelAfterAPrefixHitStillAcceptsEveryDraft) {
  auto core = BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer,
                              Config(SpecMethod::kDraft, 3), SmolLm2().model.get());
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  Collector collector;
  const std::vector<TokenId> prompt = Encode(Prompts()[0]);
  for (RequestId id = 1; id <= 2; ++id) {
    ASSERT_TRUE((*core)->Add(id, Greedy(prompt, 12, collector.Sink(id))).ok());
    ASSERT_TRUE(RunToCompletion(**core));
  }
  EXPECT_GT(collector[2].final_event.usage.cached_prompt_tokens, 0) << "no prefix-cache hit";
  EXPECT_EQ(collector[2].token_ids, collector[1].token_ids);
  const EngineStats stats = (*core)->Stats();
  EXPECT_GT(stats.spec_num_draft_tokens, 0);
  EXPECT_EQ(stats.spec_num_accepted_tokens, stats.spec_num_draft_tokens);
}

TEST(SpecGreedyTest, PreemptionWithDraftsLosesNothing) {
  // A pool so small that the batched requests preempt each other while drafting.
  EngineConfig config = Config(SpecMethod::kNgram);
  config.num_kv_blocks = 12;
  config.watermark_blocks = 1;
  const RunResult plain = RunPrompts(Config(SpecMethod::kNone), /*batched=*/false, kMaxTokens);
  const RunResult spec = RunPrompts(config, /*batched=*/true, kMaxTokens);
  EXPECT_GT(spec.stats.num_preemptions, 0);
  for (size_t i = 0; i < Prompts().size(); ++i) {
    EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << "prompt " << i;
  }
}

TEST(SpecGreedyTest, DraftModelWithAnotherVocabularyIsRefused) {
  auto core = BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer,
                              Config(SpecMethod::kDraft), Stories().model.get());
  ASSERT_FALSE(core.ok());
  EXPECT_EQ(core.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(core.status().message().find("different vocabularies"), std::string::npos)
      << core.status().message();
  EXPECT_NE(core.status().message().find("--draft-model"), std::string::npos);

  auto no_draft =
      BuildEngineCore(*SmolLm2().model, *SmolLm2().tokenizer, Config(SpecMethod::kDraft));
  ASSERT_FALSE(no_draft.ok());
  EXPECT_NE(no_draft.status().message().find("--draft-model"), std::string::npos);
}

}  // namespace
}  // namespace tokenmill::testing
