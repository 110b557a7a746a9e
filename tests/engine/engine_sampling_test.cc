// Sampling through the whole engine on the default model (SmolLM2): a seeded request's
// tokens depend only on its seed and its own tokens (alone, batched with fifteen others of
// mixed lengths and parameters, or preempted and recomputed); unseeded requests differ;
// n > 1 sequences share the prompt's blocks and are reproducible per (seed, index); an
// abort ends all n; logprobs come with each token.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

int SmolVocab() { return SmolLm2().tokenizer->vocab_size(); }

GenerateRequest Sampled(std::vector<TokenId> prompt, int max_tokens, OutputSink sink,
                        std::optional<uint64_t> seed, float temperature = 0.9f) {
  GenerateRequest request = Greedy(std::move(prompt), max_tokens, std::move(sink));
  request.sampling.temperature = temperature;
  request.sampling.top_p = 0.95f;
  request.sampling.top_k = 100;
  request.sampling.seed = seed;
  return request;
}

EngineConfig Config(int num_kv_blocks = 128) {
  EngineConfig config = SmallConfig(num_kv_blocks);
  config.num_threads = 2;
  return config;
}

std::vector<TokenId> SampleAlone(GenerateRequest request) {
  auto core = NewCore(SmolLm2(), Config());
  Collector collector;
  request.sink = collector.Sink(1);
  TM_CHECK(core->Add(1, std::move(request)).ok());
  TM_CHECK(RunToCompletion(*core));
  return collector[1].token_ids;
}

TEST(EngineSamplingTest, SeededRequestIsTheSameAloneAndBatchedWithFifteenOthers) {
  const std::vector<TokenId> prompt = RandomPrompt(23, SmolVocab(), 5);
  const std::vector<TokenId> alone = SampleAlone(Sampled(prompt, 12, nullptr, 1234));
  ASSERT_EQ(alone.size(), 12u);
  EXPECT_EQ(SampleAlone(Sampled(prompt, 12, nullptr, 1234)), alone);
  EXPECT_NE(SampleAlone(Sampled(prompt, 12, nullptr, 4321)), alone) << "the seed should matter";

  EngineConfig config = Config();
  config.scheduler.max_num_batched_tokens = 40;  // chunked prompts mixed with decodes
  auto core = NewCore(SmolLm2(), config);
  Collector collector;
  const std::vector<int> lengths = {1, 50, 7, 33, 3, 64, 12, 2, 41, 5, 19, 27, 9, 80, 15};
  for (size_t i = 0; i < lengths.size(); ++i) {
    const RequestId id = 10 + i;
    GenerateRequest other =
        Sampled(RandomPrompt(lengths[i], SmolVocab(), 60 + static_cast<uint32_t>(i)),
                4 + static_cast<int>(i % 9), collector.Sink(id), std::nullopt,
                0.3f + 0.1f * static_cast<float>(i));
    other.sampling.repetition_penalty = i % 2 == 0 ? 1.2f : 1.0f;
    other.sampling.min_p = i % 3 == 0 ? 0.05f : 0.0f;
    ASSERT_TRUE(core->Add(id, std::move(other)).ok());
    if (i == 6) {
      ASSERT_TRUE(core->Add(1, Sampled(prompt, 12, collector.Sink(1), 1234)).ok());
      for (int step = 0; step < 3; ++step) ASSERT_TRUE(core->Step());
    }
  }
  int max_batch = 0;
  while (core->has_unfinished_requests()) {
    max_batch = std::max(max_batch, core->Stats().num_running);
    ASSERT_TRUE(core->Step());
  }
  EXPECT_GE(max_batch, 10) << "the requests should have run together";
  EXPECT_EQ(collector[1].token_ids, alone);
}

TEST(EngineSamplingTest, SeededRequestsResumeAfterPreemptionWithTheSameTokens) {
  std::vector<std::vector<TokenId>> prompts;
  std::vector<std::vector<TokenId>> alone;
  for (uint32_t i = 0; i < 4; ++i) {
    prompts.push_back(RandomPrompt(30 + 5 * static_cast<int>(i), SmolVocab(), 70 + i));
    alone.push_back(SampleAlone(Sampled(prompts[i], 30, nullptr, 100 + i)));
  }
  // 4 requests of ~65 tokens (5 blocks each) in a pool of 12 blocks.
  auto core = NewCore(SmolLm2(), Config(12));
  Collector collector;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(core->Add(i + 1, Sampled(prompts[i], 30, collector.Sink(i + 1), 100 + i)).ok());
  }
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_GT(core->Stats().num_preemptions, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(collector[i + 1].token_ids, alone[i]) << "request " << i + 1;
  }
}

TEST(EngineSamplingTest, UnseededRequestsDiffer) {
  const std::vector<TokenId> prompt = RandomPrompt(10, SmolVocab(), 9);
  auto core = NewCore(SmolLm2(), Config());
  Collector collector;
  for (RequestId id = 1; id <= 2; ++id) {
    ASSERT_TRUE(core->Add(id, Sampled(prompt, 16, collector.Sink(id), std::nullopt, 1.5f)).ok());
  }
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_NE(collector[1].token_ids, collector[2].token_ids);
}

TEST(EngineSamplingTest, NSequencesShareThePromptBlocksAndFollowTheirSeedAndIndex) {
  const std::vector<TokenId> prompt = RandomPrompt(40, SmolVocab(), 11);  // 2 full blocks
  auto core = NewCore(SmolLm2(), Config());
  SequenceCollector sequences;
  GenerateRequest request = Sampled(prompt, 8, sequences.Sink(), 77);
  request.n = 4;
  ASSERT_TRUE(core->Add(1, std::move(request)).ok());
  EXPECT_EQ(core->Stats().num_waiting, 4) << "the held-back sequences wait too";
  // Sequence 0 computes the prompt alone; the others join next step and share its blocks.
  ASSERT_TRUE(core->Step());
  EXPECT_EQ(core->Stats().num_running, 1);
  EXPECT_EQ(core->Stats().num_waiting, 3);
  ASSERT_TRUE(core->Step());
  EXPECT_EQ(core->Stats().num_running, 4);
  EXPECT_EQ(core->Stats().num_waiting, 0);
  // 3 blocks for sequence 0 (2 full prompt blocks + 1 partial), 1 own block for each other.
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 3 + 3);
  ASSERT_TRUE(RunToCompletion(*core));
  ASSERT_EQ(sequences.size(), 4u);
  std::set<std::vector<TokenId>> distinct;
  for (int i = 0; i < 4; ++i) {
    const Collected& s = sequences[i];
    EXPECT_TRUE(s.finished);
    EXPECT_EQ(s.final_event.index, i);
    EXPECT_EQ(s.final_event.id, 1u);
    EXPECT_EQ(s.final_event.usage.prompt_tokens, 40);
    EXPECT_EQ(s.final_event.usage.completion_tokens, 8);
    EXPECT_EQ(s.final_event.usage.cached_prompt_tokens, i == 0 ? 0 : 32) << "sequence " << i;
    distinct.insert(s.token_ids);
    // Sequence i is the request with seed 77 and sequence_index i.
    GenerateRequest single = Sampled(prompt, 8, nullptr, 77);
    single.sampling.sequence_index = i;
    EXPECT_EQ(SampleAlone(std::move(single)), s.token_ids) << "sequence " << i;
  }
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
}

TEST(EngineSamplingTest, AbortEndsAllNSequences) {
  auto core = NewCore(SmolLm2(), Config());
  SequenceCollector sequences;
  GenerateRequest request = Sampled(RandomPrompt(20, SmolVocab(), 12), 50, sequences.Sink(), 5);
  request.n = 3;
  ASSERT_TRUE(core->Add(7, std::move(request)).ok());
  EXPECT_FALSE(core->Add(9, Sampled({5}, 2, sequences.Sink(), 1)).ok()) << "9 is sequence 2's";
  ASSERT_TRUE(core->Step());  // sequences 1 and 2 are still held back
  EXPECT_TRUE(core->Abort(7));
  EXPECT_FALSE(core->has_unfinished_requests());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(sequences[i].finished);
    EXPECT_EQ(sequences[i].final_event.finish_reason, CompletionReason::kAbort);
  }
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
}

TEST(EngineSamplingTest, LogprobsComeWithEveryTokenAndRankTheChosenOne) {
  auto core = NewCore(SmolLm2(), Config());
  Collector collector;
  GenerateRequest request = Greedy(RandomPrompt(15, SmolVocab(), 13), 6, collector.Sink(1));
  request.sampling.logprobs = true;
  request.sampling.top_logprobs = 3;
  ASSERT_TRUE(core->Add(1, std::move(request)).ok());
  while (core->has_unfinished_requests()) ASSERT_TRUE(core->Step());
  // Greedy: the chosen token is the most likely one.
  const Collected& c = collector[1];
  ASSERT_EQ(c.token_ids.size(), 6u);
  ASSERT_EQ(c.logprobs.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const TokenLogprobs& l = c.logprobs[i];
    EXPECT_EQ(l.chosen.token_id, c.token_ids[i]);
    ASSERT_EQ(l.top.size(), 3u);
    EXPECT_EQ(l.top[0].token_id, c.token_ids[i]);
    EXPECT_EQ(l.top[0].logprob, l.chosen.logprob);
    EXPECT_LE(l.chosen.logprob, 0.0f);
    EXPECT_GE(l.top[0].logprob, l.top[1].logprob);
    EXPECT_GE(l.top[1].logprob, l.top[2].logprob);
  }
}

TEST(EngineSamplingTest, MinTokensKeepsEndOfGenerationAway) {
  // A chat prompt that the model answers briefly, then ends with <|im_end|>.
  const Tokenizer& tokenizer = *SmolLm2().tokenizer;
  auto ids = tokenizer.Encode("<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\n",
                              EncodeOptions{.add_special = false, .parse_special = true});
  ASSERT_TRUE(ids.ok());
  GenerateRequest plain = Greedy(*ids, 40, nullptr, /*ignore_eos=*/false);
  const std::vector<TokenId> short_answer = SampleAlone(plain);
  ASSERT_LT(short_answer.size(), 20u) << "the model should end its answer early";
  GenerateRequest longer = Greedy(*ids, 40, nullptr, /*ignore_eos=*/false);
  longer.sampling.min_tokens = 20;
  const std::vector<TokenId> forced = SampleAlone(std::move(longer));
  EXPECT_GE(forced.size(), 20u);
  const auto& eog = tokenizer.end_of_generation_ids();
  for (size_t i = 0; i + 1 < std::min<size_t>(forced.size(), 20); ++i) {
    EXPECT_EQ(std::count(eog.begin(), eog.end(), forced[i]), 0) << "position " << i;
  }
}

}  // namespace
}  // namespace tokenmill::testing
