// Add-time rejections, the context length the pool allows, Abort/FinishRequest, and what
// each ScheduledRequest, RequestEvent and the counters report.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/scheduler/scheduler_sim.h"

namespace tokenmill::testing {
namespace scheduler_admission_test {

using ::testing::HasSubstr;

SchedulerConfig Config(int budget = 64, int max_num_seqs = 8, int max_model_len = 64) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = max_num_seqs;
  config.max_model_len = max_model_len;
  config.max_queue = 16;
  return config;
}

TEST(SchedulerConfigTest, RejectsNonPositiveLimitsNamingTheFlag) {
  EXPECT_TRUE(ValidateSchedulerConfig(Config()).ok());
  SchedulerConfig config = Config(/*budget=*/0);
  Status status = ValidateSchedulerConfig(config);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--max-num-batched-tokens"));
  config = Config(64, /*max_num_seqs=*/-1);
  EXPECT_THAT(ValidateSchedulerConfig(config).message(), HasSubstr("--max-num-seqs"));
  config = Config(64, 8, /*max_model_len=*/1);
  EXPECT_EQ(ValidateSchedulerConfig(config).code(), StatusCode::kInvalidArgument);
  config = Config();
  config.max_prefills_per_step = -1;
  EXPECT_THAT(ValidateSchedulerConfig(config).message(), HasSubstr("--max-prefills-per-step"));
}

TEST(SchedulerAddTest, PromptLongerThanTheContextIsRejected) {
  SchedulerSim sim(Config(64, 8, /*max_model_len=*/16), MakeCacheConfig(64, 4));
  EXPECT_EQ(sim.scheduler().max_model_len(), 16);
  const Status status = sim.Add(MakeRequest(1, 16, 1));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("16 tokens"));
  EXPECT_THAT(status.message(), HasSubstr("context length is 16"));
  EXPECT_THAT(status.message(), HasSubstr("at most 15"));
  EXPECT_TRUE(sim.Add(MakeRequest(2, 15, 1)).ok());
  EXPECT_TRUE(sim.scheduler().has_unfinished_requests());
}

TEST(SchedulerAddTest, PromptThatCanNeverFitThePoolIsRejected) {
  // 4 blocks of 4 with 1 kept free for admission: one request holds at most 12 tokens of
  // K/V, so its context is 13 tokens (the last sampled token needs no K/V).
  SchedulerSim sim(Config(), MakeCacheConfig(4, 4, /*watermark_blocks=*/1));
  EXPECT_EQ(sim.scheduler().max_model_len(), 13);
  const Status status = sim.Add(MakeRequest(1, 13, 1));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("KV cache holds at most 13 tokens"));
  EXPECT_THAT(status.message(), HasSubstr("more memory"));
  EXPECT_FALSE(sim.scheduler().has_unfinished_requests());
}

TEST(SchedulerAddTest, LongestPromptThatFitsRunsToThePoolLimit) {
  SchedulerSim sim(Config(/*budget=*/5), MakeCacheConfig(4, 4, /*watermark_blocks=*/1));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 12, 100)).ok());
  ASSERT_TRUE(sim.RunToCompletion(10));
  EXPECT_EQ(sim.streamed(1).size(), 1u);  // 12 + 1 = the 13-token context
  EXPECT_EQ(sim.States(), "1:len");
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerAddTest, ShortPromptGrowsUntilThePoolLimitWithoutDeadlock) {
  SchedulerSim sim(Config(), MakeCacheConfig(4, 4, /*watermark_blocks=*/1));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 2, 100)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, 2, 100)).ok());
  ASSERT_TRUE(sim.RunToCompletion(100));
  EXPECT_EQ(sim.streamed(1).size(), 11u);
  EXPECT_EQ(sim.streamed(2).size(), 11u);
  EXPECT_GT(sim.scheduler().Stats().num_preemptions, 0);
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerAddTest, BadRequestsAreRejected) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  EXPECT_THAT(sim.Add(MakeRequest(1, 0, 4)).message(), HasSubstr("prompt is empty"));
  EXPECT_THAT(sim.Add(MakeRequest(1, 3, 0)).message(), HasSubstr("max_tokens"));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 3, 4)).ok());
  const Status duplicate = sim.Add(MakeRequest(1, 3, 4));
  EXPECT_EQ(duplicate.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(duplicate.message(), HasSubstr("already in use"));
}

TEST(SchedulerAddTest, FullQueueIsResourceExhaustedUntilAdmissionDrainsIt) {
  SchedulerConfig config = Config();
  config.max_queue = 2;
  SchedulerSim sim(config, MakeCacheConfig(16, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 3, 4)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, 3, 4)).ok());
  const Status full = sim.Add(MakeRequest(3, 3, 4));
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("--max-queue 2"));
  EXPECT_EQ(sim.Step(), "1:3 2:3");
  EXPECT_TRUE(sim.Add(MakeRequest(3, 3, 4)).ok());
}

TEST(SchedulerFinishTest, UnknownOrFinishedRequestIsNotFound) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  EXPECT_EQ(sim.scheduler().Abort(7).code(), StatusCode::kNotFound);
  ASSERT_TRUE(sim.Add(MakeRequest(1, 3, 4)).ok());
  ASSERT_TRUE(sim.Abort(1).ok());
  EXPECT_EQ(sim.scheduler().Abort(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(sim.scheduler().FinishRequest(1, FinishReason::kStop).code(), StatusCode::kNotFound);
}

TEST(SchedulerFinishTest, EndedRequestsAreListedOnceInTheNextOutput) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 3, 1)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, 3, 5)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(3, 3, 5)).ok());
  EXPECT_EQ(sim.Step(), "1:3 2:3 3:3");  // 1 ends by length
  ASSERT_TRUE(sim.Abort(2).ok());
  EXPECT_EQ(sim.Step(), "3:1");
  std::vector<RequestId> finished = sim.last_output().finished_ids;
  std::sort(finished.begin(), finished.end());
  EXPECT_EQ(finished, (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(sim.Step(), "3:1");
  EXPECT_TRUE(sim.last_output().finished_ids.empty());
}

// A stop string is the engine's to match: it finishes the request with kStop after Update.
TEST(SchedulerFinishTest, EngineFinishesARunningRequestFreeingItsBlocks) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 6, 10)).ok());
  EXPECT_EQ(sim.Step(), "1:6");
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 2);
  ASSERT_TRUE(sim.scheduler().FinishRequest(1, FinishReason::kStop).ok());
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_EQ(sim.scheduler().Find(1), nullptr);
  EXPECT_EQ(sim.Step(), "");
  EXPECT_EQ(sim.last_output().finished_ids, (std::vector<RequestId>{1}));
}

// The engine applies aborts between steps, but one that lands between Schedule() and
// Update() must not bring the request back: its sampled tokens are dropped.
TEST(SchedulerFinishTest, AbortBetweenScheduleAndUpdateDropsItsTokens) {
  KvCacheManager kv_cache(MakeCacheConfig(16, 4));
  Scheduler scheduler(Config(), kv_cache);
  FakeRunner runner(16, 4);
  ASSERT_TRUE(scheduler.Add(MakeRequest(1, 5, 4)).ok());
  ASSERT_TRUE(scheduler.Add(MakeRequest(2, 5, 4)).ok());
  const SchedulerOutput step = scheduler.Schedule();
  ASSERT_EQ(step.requests.size(), 2u);
  const ModelOutput sampled = runner.Execute(step);
  ASSERT_TRUE(scheduler.Abort(1).ok());
  const std::vector<RequestEvent> events = scheduler.Update(sampled);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id, 2u);
  EXPECT_EQ(scheduler.Find(1), nullptr);
  EXPECT_TRUE(scheduler.CheckInvariants().ok());
  EXPECT_EQ(kv_cache.BlockTable(1).size(), 0u);
  const SchedulerOutput next = scheduler.Schedule();
  EXPECT_EQ(next.finished_ids, std::vector<RequestId>{1});
  ASSERT_EQ(next.requests.size(), 1u);
  EXPECT_EQ(next.requests[0].id, 2u);
}

TEST(SchedulerOutputTest, ChunkedPrefillRowsLogitsAndBlocks) {
  SchedulerSim sim(Config(/*budget=*/8), MakeCacheConfig(16, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 20, 2)).ok());
  const std::vector<TokenId> prompt = sim.prompt(1);

  EXPECT_EQ(sim.Step(), "1:8");
  ScheduledRequest step = sim.last_output().requests.at(0);
  EXPECT_EQ(step.num_computed_tokens, 0);
  EXPECT_TRUE(step.is_prefill);
  EXPECT_TRUE(step.first_scheduled);
  EXPECT_EQ(step.num_logits, 0);
  EXPECT_EQ(step.token_ids, std::vector<TokenId>(prompt.begin(), prompt.begin() + 8));
  EXPECT_EQ(step.new_block_ids.size(), 2u);
  EXPECT_EQ(step.block_table, step.new_block_ids);
  EXPECT_TRUE(sim.last_events().empty());

  EXPECT_EQ(sim.Step(), "1:8");
  step = sim.last_output().requests.at(0);
  EXPECT_EQ(step.num_computed_tokens, 8);
  EXPECT_FALSE(step.first_scheduled);
  EXPECT_EQ(step.block_table.size(), 4u);
  EXPECT_EQ(step.new_block_ids, std::vector<BlockId>(step.block_table.begin() + 2,
                                                     step.block_table.end()));

  EXPECT_EQ(sim.Step(), "1:4");
  step = sim.last_output().requests.at(0);
  EXPECT_TRUE(step.is_prefill);
  EXPECT_EQ(step.num_logits, 1);
  EXPECT_EQ(step.new_block_ids.size(), 1u);
  ASSERT_EQ(sim.last_events().size(), 1u);
  EXPECT_EQ(sim.last_events()[0].num_prompt_tokens, 20);
  EXPECT_EQ(sim.last_events()[0].num_output_tokens, 1);

  EXPECT_EQ(sim.Step(), "1:1");
  step = sim.last_output().requests.at(0);
  EXPECT_FALSE(step.is_prefill);
  EXPECT_EQ(step.num_logits, 1);
  EXPECT_EQ(step.token_ids, std::vector<TokenId>{sim.streamed(1).at(0)});
  EXPECT_EQ(sim.last_events().at(0).finish_reason, FinishReason::kLength);
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerStatsTest, CountsTokensHitsAndQueues) {
  SchedulerSim sim(Config(64, /*max_num_seqs=*/1), MakeCacheConfig(16, 4));
  std::vector<TokenId> prompt(10);
  for (int i = 0; i < 10; ++i) prompt[i] = 100 + i;
  std::vector<TokenId> sharing(prompt.begin(), prompt.begin() + 8);
  sharing.insert(sharing.end(), {1, 2, 3});
  ASSERT_TRUE(sim.Add(MakeRequest(1, prompt, 2)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, sharing, 1)).ok());

  EXPECT_EQ(sim.Step(), "1:10");
  SchedulerStats stats = sim.scheduler().Stats();
  EXPECT_EQ(stats.num_running, 1);
  EXPECT_EQ(stats.num_waiting, 1);
  EXPECT_GT(stats.kv_usage, 0.0);
  EXPECT_EQ(sim.Step(), "1:1");
  EXPECT_EQ(sim.Step(), "2:3");
  ASSERT_EQ(sim.last_events().size(), 1u);
  EXPECT_EQ(sim.last_events()[0].num_cached_prompt_tokens, 8);

  stats = sim.scheduler().Stats();
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_waiting, 0);
  EXPECT_EQ(stats.num_prompt_tokens, 10 + 3);
  EXPECT_EQ(stats.num_generation_tokens, 2 + 1);
  EXPECT_EQ(stats.num_prefix_query_tokens, 10 + 11);
  EXPECT_EQ(stats.num_prefix_hit_tokens, 8);
  EXPECT_EQ(stats.num_preemptions, 0);
  EXPECT_EQ(stats.num_finished, 2);
  EXPECT_EQ(stats.kv_usage, 0.0);
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerStatsTest, CacheSaltKeepsEqualPromptsApart) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  NewRequest first = MakeRequest(1, 9, 1);
  NewRequest second = MakeRequest(2, first.prompt_token_ids, 1);
  first.cache_salt = "tenant-a";
  second.cache_salt = "tenant-b";
  NewRequest third = MakeRequest(3, first.prompt_token_ids, 1);
  third.cache_salt = "tenant-a";
  ASSERT_TRUE(sim.Add(first).ok());
  EXPECT_EQ(sim.Step(), "1:9");
  ASSERT_TRUE(sim.Add(second).ok());
  EXPECT_EQ(sim.Step(), "2:9");
  ASSERT_TRUE(sim.Add(third).ok());
  EXPECT_EQ(sim.Step(), "3:1");
  sim.ExpectReferenceOutputs();
}

// Prompts of 8 shared tokens (two blocks of 4) and 3 of each request's own.
std::vector<TokenId> SharedPrompt(TokenId own) {
  std::vector<TokenId> prompt = {100, 101, 102, 103, 104, 105, 106, 107};
  prompt.insert(prompt.end(), {own, own, own});
  return prompt;
}

// Two requests arriving together behind a prompt nobody has computed: the second waits one
// step for the first to compute the shared blocks, then computes only its own 3 tokens.
TEST(SchedulerSharedPrefillTest, RequestsArrivingTogetherComputeTheirSharedBlocksOnce) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, SharedPrompt(1), 2)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, SharedPrompt(2), 2)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(3, 6, 2)).ok());  // behind it in the queue: goes on
  EXPECT_EQ(sim.Step(), "1:11 3:6");
  EXPECT_EQ(sim.Step(), "1:1 3:1 2:3");
  EXPECT_EQ(sim.scheduler().Stats().num_prompt_tokens, 11 + 3 + 6);
  EXPECT_EQ(sim.scheduler().Stats().num_prefix_hit_tokens, 8);
  // Each request looked up once, at its admission, however long it waited.
  EXPECT_EQ(sim.kv_cache().Stats().prefix_query_tokens, 11 + 11 + 6);
  ASSERT_TRUE(sim.RunToCompletion(10));
  sim.ExpectReferenceOutputs();
}

// A long shared prompt computed in chunks: the second request waits until the first has
// computed every block they share, then reads them all from the cache.
TEST(SchedulerSharedPrefillTest, ARequestWaitsOutAChunkedPrefillOfItsPrefix) {
  SchedulerSim sim(Config(/*budget=*/8), MakeCacheConfig(16, 4));
  std::vector<TokenId> shared(20);
  for (int i = 0; i < 20; ++i) shared[i] = 200 + i;
  std::vector<TokenId> first = shared, second = shared;
  first.push_back(1);
  second.insert(second.end(), {2, 2});
  ASSERT_TRUE(sim.Add(MakeRequest(1, first, 1)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, second, 1)).ok());
  EXPECT_EQ(sim.Step(), "1:8");
  EXPECT_EQ(sim.Step(), "1:8");
  EXPECT_EQ(sim.Step(), "1:5");  // the fifth shared block is computed in this step
  EXPECT_EQ(sim.Step(), "2:2");  // the first finished with its one token
  EXPECT_EQ(sim.last_output().requests.at(0).num_computed_tokens, 20);
  ASSERT_TRUE(sim.RunToCompletion(10));
  sim.ExpectReferenceOutputs();
}

// No waiting where it would not share: another tenant's salt, prompt_logprobs (computes
// every position), no full block of the prompt in common, prefix caching off.
TEST(SchedulerSharedPrefillTest, NoWaitWhereNothingWouldBeShared) {
  {
    SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
    NewRequest other_tenant = MakeRequest(2, SharedPrompt(2), 1);
    other_tenant.cache_salt = "tenant-b";
    NewRequest logprobs = MakeRequest(3, SharedPrompt(3), 1);
    logprobs.sampling.prompt_logprobs = 0;
    std::vector<TokenId> one_block_differs = SharedPrompt(4);
    one_block_differs[1] = 999;
    ASSERT_TRUE(sim.Add(MakeRequest(1, SharedPrompt(1), 1)).ok());
    ASSERT_TRUE(sim.Add(std::move(other_tenant)).ok());
    ASSERT_TRUE(sim.Add(std::move(logprobs)).ok());
    ASSERT_TRUE(sim.Add(MakeRequest(4, one_block_differs, 1)).ok());
    EXPECT_EQ(sim.Step(), "1:11 2:11 3:11 4:11");
    sim.ExpectReferenceOutputs();
  }
  KvCacheConfig no_caching = MakeCacheConfig(16, 4);
  no_caching.enable_prefix_caching = false;
  SchedulerSim sim(Config(), no_caching);
  ASSERT_TRUE(sim.Add(MakeRequest(1, SharedPrompt(1), 1)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, SharedPrompt(2), 1)).ok());
  EXPECT_EQ(sim.Step(), "1:11 2:11");
  sim.ExpectReferenceOutputs();
}

// --max-prefills-per-step 1: a burst of requests begins its prompts a step apart, those
// already running decoding beside each; one whose prompt is found cached but for its last
// block (a request of SharedPrompt's after the first) does not count.
TEST(SchedulerPrefillsPerStepTest, ABurstBeginsItsPromptsOneAStep) {
  SchedulerConfig config = Config();
  config.max_prefills_per_step = 1;
  SchedulerSim sim(config, MakeCacheConfig(32, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, SharedPrompt(1), 4)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, 7, 4)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(3, 6, 4)).ok());
  EXPECT_EQ(sim.Step(), "1:11");
  EXPECT_EQ(sim.Step(), "1:1 2:7");
  EXPECT_EQ(sim.Step(), "1:1 2:1 3:6");
  ASSERT_TRUE(sim.Add(MakeRequest(4, SharedPrompt(4), 2)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(5, 9, 2)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(6, 5, 2)).ok());
  EXPECT_EQ(sim.Step(), "1:1 2:1 3:1 4:3 5:9");
  EXPECT_EQ(sim.Step(), "2:1 3:1 4:1 5:1 6:5");  // request 1 has its 4 tokens
  ASSERT_TRUE(sim.RunToCompletion(10));
  sim.ExpectReferenceOutputs();
}

// A prompt_logprobs request never reads the prefix cache (cached positions have no logits)
// and computes at most kMaxPromptLogprobsTokensPerStep tokens a step (each a row of logits).
TEST(SchedulerPromptLogprobsTest, NoPrefixHitAndBoundedChunks) {
  SchedulerSim sim(Config(/*budget=*/2048, 8, /*max_model_len=*/1024), MakeCacheConfig(128, 16));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 600, 1)).ok());
  sim.Step();
  EXPECT_EQ(sim.last_output().requests.at(0).num_new_tokens, 600);  // whole, as the budget allows
  ASSERT_TRUE(sim.RunToCompletion(10));

  NewRequest again = MakeRequest(2, sim.prompt(1), 1);
  again.sampling.prompt_logprobs = 0;
  ASSERT_TRUE(sim.Add(std::move(again)).ok());
  std::vector<int> chunks;
  while (sim.scheduler().has_unfinished_requests()) {
    sim.Step();
    chunks.push_back(sim.last_output().requests.at(0).num_new_tokens);
  }
  EXPECT_EQ(chunks, (std::vector<int>{256, 256, 88}));
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);

  ASSERT_TRUE(sim.Add(MakeRequest(3, sim.prompt(1), 1)).ok());  // a plain one still hits
  sim.Step();
  EXPECT_EQ(sim.last_output().requests.at(0).num_computed_tokens, 592);
  sim.ExpectReferenceOutputs();
}

}  // namespace scheduler_admission_test
}  // namespace tokenmill::testing
