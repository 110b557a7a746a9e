// Prompt logprobs (SamplingParams::prompt_logprobs): one entry per prompt token, each the
// log-probability the model gave it after the tokens before it; such a request never reads
// the prefix cache (cached positions have no logits) and gives every KV block back. Driven
// step by step through EngineCore with stories260K.
#include <gtest/gtest.h>

#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

constexpr int kTop = 5;

GenerateRequest WithPromptLogprobs(std::vector<TokenId> prompt, OutputSink sink) {
  GenerateRequest request = Greedy(std::move(prompt), 4, std::move(sink));
  request.sampling.prompt_logprobs = kTop;
  return request;
}

// The entries of `prompt` from a fresh engine with the given config.
Collected RunWithPromptLogprobs(const std::vector<TokenId>& prompt,
                                const EngineConfig& config = SmallConfig()) {
  const std::unique_ptr<EngineCore> core = NewCore(Stories(), config);
  Collector collector;
  TM_CHECK(core->Add(1, WithPromptLogprobs(prompt, collector.Sink(1))).ok());
  TM_CHECK(RunToCompletion(*core));
  TM_CHECK(core->CheckIdle().ok());
  return collector[1];
}

TEST(EnginePromptLogprobsTest, OneEntryPerPromptTokenBeforeTheFirstGeneratedToken) {
  const std::vector<TokenId> prompt = RandomPrompt(37, StoriesVocab(), 7);
  const Collected out = RunWithPromptLogprobs(prompt);
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size());
  EXPECT_LE(out.num_tokens_before_prompt_logprobs_done, 1);
  // Nothing precedes the first token.
  EXPECT_EQ(out.prompt_logprobs[0].chosen.token_id, prompt[0]);
  EXPECT_EQ(out.prompt_logprobs[0].chosen.logprob, 0.0f);
  EXPECT_TRUE(out.prompt_logprobs[0].top.empty());
  for (size_t i = 1; i < prompt.size(); ++i) {
    const TokenLogprobs& entry = out.prompt_logprobs[i];
    EXPECT_EQ(entry.chosen.token_id, prompt[i]) << i;
    EXPECT_LT(entry.chosen.logprob, 0.0f) << i;
    ASSERT_EQ(entry.top.size(), static_cast<size_t>(kTop)) << i;
    EXPECT_LE(entry.chosen.logprob, entry.top[0].logprob) << i;
    for (int k = 1; k < kTop; ++k) EXPECT_LE(entry.top[k].logprob, entry.top[k - 1].logprob);
  }
  // Sampling is untouched: the same tokens as without prompt logprobs.
  const std::unique_ptr<EngineCore> core = NewCore(Stories());
  Collector plain;
  ASSERT_TRUE(core->Add(1, Greedy(prompt, 4, plain.Sink(1))).ok());
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_EQ(out.token_ids, plain[1].token_ids);
}

// Entry i is what the model predicts after prompt[0, i): the logprobs a request with that
// prefix as its whole prompt reports for its first sampled token.
TEST(EnginePromptLogprobsTest, EachEntryEqualsTheNextTokenLogprobsOfItsPrefix) {
  const std::vector<TokenId> prompt = RandomPrompt(20, StoriesVocab(), 11);
  const Collected out = RunWithPromptLogprobs(prompt);
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size());
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::unique_ptr<EngineCore> core = NewCore(Stories());
    Collector collector;
    GenerateRequest request =
        Greedy(std::vector<TokenId>(prompt.begin(), prompt.begin() + i), 1, collector.Sink(1));
    request.sampling.logprobs = true;
    request.sampling.top_logprobs = kTop;
    ASSERT_TRUE(core->Add(1, std::move(request)).ok());
    ASSERT_TRUE(RunToCompletion(*core));
    const TokenLogprobs& next = collector[1].logprobs.at(0);
    const TokenLogprobs& entry = out.prompt_logprobs[i];
    for (int k = 0; k < kTop; ++k) {
      EXPECT_EQ(entry.top[k].token_id, next.top[k].token_id) << i << " " << k;
      EXPECT_NEAR(entry.top[k].logprob, next.top[k].logprob, 1e-5) << i << " " << k;
    }
  }
}

TEST(EnginePromptLogprobsTest, ChunkedPrefillGivesTheSameEntries) {
  const std::vector<TokenId> prompt = RandomPrompt(50, StoriesVocab(), 13);
  const Collected whole = RunWithPromptLogprobs(prompt);
  EngineConfig chunked = SmallConfig();
  chunked.scheduler.max_num_batched_tokens = 16;
  const Collected pieces = RunWithPromptLogprobs(prompt, chunked);
  ASSERT_EQ(pieces.prompt_logprobs.size(), prompt.size());
  EXPECT_LE(pieces.num_tokens_before_prompt_logprobs_done, 1);
  for (size_t i = 0; i < prompt.size(); ++i) {
    EXPECT_EQ(pieces.prompt_logprobs[i].chosen.token_id, whole.prompt_logprobs[i].chosen.token_id);
    EXPECT_NEAR(pieces.prompt_logprobs[i].chosen.logprob, whole.prompt_logprobs[i].chosen.logprob,
                1e-5)
        << i;
  }
}

TEST(EnginePromptLogprobsTest, SkipsPrefixCacheReadsAndGivesEveryBlockBack) {
  const std::vector<TokenId> prompt = RandomPrompt(60, StoriesVocab(), 17);
  const std::unique_ptr<EngineCore> core = NewCore(Stories());
  Collector collector;
  // The first request caches the prompt's full blocks.
  ASSERT_TRUE(core->Add(1, Greedy(prompt, 2, collector.Sink(1))).ok());
  ASSERT_TRUE(RunToCompletion(*core));
  const int64_t hits_before = core->Stats().prefix_hit_tokens;

  ASSERT_TRUE(core->Add(2, WithPromptLogprobs(prompt, collector.Sink(2))).ok());
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_EQ(collector[2].final_event.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(core->Stats().prefix_hit_tokens, hits_before);
  EXPECT_EQ(collector[2].prompt_logprobs.size(), prompt.size());

  // A plain request still reads the cache.
  ASSERT_TRUE(core->Add(3, Greedy(prompt, 2, collector.Sink(3))).ok());
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_GT(collector[3].final_event.usage.cached_prompt_tokens, 0);
  EXPECT_TRUE(core->CheckIdle().ok());
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
}

// A preempted request recomputes its prompt's rows: their entries, already sent, are not sent
// again, and every block comes back.
TEST(EnginePromptLogprobsTest, PreemptionSendsEachEntryOnce) {
  std::vector<std::vector<TokenId>> prompts;
  for (uint32_t i = 0; i < 6; ++i) {
    prompts.push_back(RandomPrompt(20 + 3 * i, StoriesVocab(), 40 + i));
  }
  // 6 requests of ~100 tokens (7 blocks each) in a pool of 16 blocks.
  const std::unique_ptr<EngineCore> core = NewCore(Stories(), SmallConfig(16));
  Collector collector;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest request = Greedy(prompts[i], 80, collector.Sink(i + 1));
    request.sampling.prompt_logprobs = kTop;
    ASSERT_TRUE(core->Add(i + 1, std::move(request)).ok());
  }
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_GT(core->Stats().num_preemptions, 0);
  EXPECT_TRUE(core->CheckIdle().ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Collected alone = RunWithPromptLogprobs(prompts[i]);
    const std::vector<TokenLogprobs>& entries = collector[i + 1].prompt_logprobs;
    ASSERT_EQ(entries.size(), prompts[i].size()) << "request " << i + 1;
    for (size_t k = 0; k < entries.size(); ++k) {
      EXPECT_EQ(entries[k].chosen.token_id, prompts[i][k]);
      EXPECT_NEAR(entries[k].chosen.logprob, alone.prompt_logprobs[k].chosen.logprob, 1e-5);
    }
  }
}

TEST(EnginePromptLogprobsTest, OnlySequenceZeroOfNCarriesThem) {
  const std::vector<TokenId> prompt = RandomPrompt(40, StoriesVocab(), 19);
  const std::unique_ptr<EngineCore> core = NewCore(Stories());
  Collector collector;
  GenerateRequest request = WithPromptLogprobs(prompt, collector.Sink(1));
  request.n = 3;
  request.sampling.temperature = 1.0f;
  // Sinks are keyed by the request id; every sequence's event carries id 1 and its index.
  std::vector<size_t> entries(3, 0);
  request.sink = [&entries](GenerateOutput&& out) {
    entries[static_cast<size_t>(out.index)] += out.prompt_logprobs.size();
  };
  ASSERT_TRUE(core->Add(1, std::move(request)).ok());
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_EQ(entries[0], prompt.size());
  EXPECT_EQ(entries[1], 0u);
  EXPECT_EQ(entries[2], 0u);
  EXPECT_TRUE(core->CheckIdle().ok());
}

TEST(EnginePromptLogprobsTest, OutOfRangeOrWithKvWindowIsRefused) {
  const std::unique_ptr<EngineCore> core = NewCore(Stories());
  Collector collector;
  GenerateRequest request =
      WithPromptLogprobs(RandomPrompt(5, StoriesVocab(), 1), collector.Sink(1));
  request.sampling.prompt_logprobs = 21;
  const Status too_many = core->Add(1, request);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("prompt_logprobs = 21 must be in [0, 20]"), std::string::npos)
      << too_many.message();
  request.sampling.prompt_logprobs = 0;
  request.kv_window = KvWindow{};
  const Status window = core->Add(1, request);
  EXPECT_NE(window.message().find("prompt_logprobs does not work with kv_window"),
            std::string::npos)
      << window.message();
}

}  // namespace
}  // namespace tokenmill::testing
