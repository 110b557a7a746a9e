// Abort in every state frees all of the request's blocks at once (before the next step),
// streams one final abort event, and leaves the others running unharmed.
#include <gtest/gtest.h>

#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tokenmill::testing {
namespace {

RequestState StateOf(const EngineCore& core, RequestId id) {
  const Request* request = core.scheduler().Find(id);
  TM_CHECK(request != nullptr);
  return request->state;
}

void ExpectAborted(const Collector& collector, RequestId id) {
  ASSERT_TRUE(collector.finished(id));
  EXPECT_EQ(collector[id].final_event.finish_reason, CompletionReason::kAbort);
  EXPECT_TRUE(collector[id].final_event.error.ok());
}

TEST(EngineAbortTest, WaitingRequest) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_num_seqs = 1;
  auto core = NewCore(Stories(), config);
  Collector collector;
  ASSERT_TRUE(
      core->Add(1, Greedy(RandomPrompt(10, StoriesVocab(), 1), 20, collector.Sink(1))).ok());
  ASSERT_TRUE(
      core->Add(2, Greedy(RandomPrompt(10, StoriesVocab(), 2), 20, collector.Sink(2))).ok());
  ASSERT_TRUE(core->Step());
  ASSERT_EQ(StateOf(*core, 2), RequestState::kWaiting);
  EXPECT_TRUE(core->Abort(2));
  ExpectAborted(collector, 2);
  EXPECT_EQ(collector[2].num_events, 1);
  EXPECT_FALSE(core->Abort(2));  // already gone
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_EQ(collector[1].token_ids.size(), 20u);
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
}

TEST(EngineAbortTest, RequestInChunkedPrefill) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_num_batched_tokens = 8;
  auto core = NewCore(Stories(), config);
  Collector collector;
  ASSERT_TRUE(
      core->Add(1, Greedy(RandomPrompt(60, StoriesVocab(), 3), 20, collector.Sink(1))).ok());
  ASSERT_TRUE(core->Step());
  ASSERT_TRUE(core->Step());
  ASSERT_EQ(StateOf(*core, 1), RequestState::kRunning);
  ASSERT_EQ(core->scheduler().Find(1)->num_computed_tokens, 16);
  ASSERT_GT(core->kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_TRUE(core->Abort(1));
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
  ExpectAborted(collector, 1);
  EXPECT_TRUE(collector[1].token_ids.empty());
  EXPECT_FALSE(core->has_unfinished_requests());
  EXPECT_FALSE(core->Step());
  EXPECT_TRUE(core->scheduler().CheckInvariants().ok());
}

TEST(EngineAbortTest, DecodingRequestAmongOthers) {
  auto core = NewCore(Stories(), SmallConfig());
  Collector collector;
  for (RequestId id = 1; id <= 3; ++id) {
    ASSERT_TRUE(core->Add(id, Greedy(RandomPrompt(30, StoriesVocab(), static_cast<uint32_t>(id)),
                                     40, collector.Sink(id)))
                    .ok());
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(core->Step());
  ASSERT_EQ(collector[2].token_ids.size(), 5u);
  const int in_use = core->kv_cache().Stats().num_in_use_blocks;
  const int blocks_of_2 = static_cast<int>(core->kv_cache().BlockTable(2).size());
  EXPECT_TRUE(core->Abort(2));
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, in_use - blocks_of_2);
  ExpectAborted(collector, 2);
  EXPECT_EQ(collector[2].final_event.usage.completion_tokens, 5);
  ASSERT_TRUE(RunToCompletion(*core));
  EXPECT_EQ(collector[1].token_ids.size(), 40u);
  EXPECT_EQ(collector[3].token_ids.size(), 40u);
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
}

TEST(EngineAbortTest, PreemptedRequest) {
  auto core = NewCore(Stories(), SmallConfig(12));
  Collector collector;
  for (RequestId id = 1; id <= 4; ++id) {
    ASSERT_TRUE(core->Add(id, Greedy(RandomPrompt(24, StoriesVocab(), static_cast<uint32_t>(id)),
                                     90, collector.Sink(id)))
                    .ok());
  }
  std::optional<RequestId> preempted;
  for (int i = 0; i < 200 && !preempted; ++i) {
    ASSERT_TRUE(core->Step());
    for (RequestId id = 1; id <= 4; ++id) {
      const Request* r = core->scheduler().Find(id);
      if (r != nullptr && r->state == RequestState::kPreempted) preempted = id;
    }
  }
  ASSERT_TRUE(preempted.has_value()) << "12 blocks should not hold four requests of 114 tokens";
  EXPECT_TRUE(core->kv_cache().BlockTable(*preempted).empty());
  EXPECT_TRUE(core->Abort(*preempted));
  ExpectAborted(collector, *preempted);
  ASSERT_TRUE(RunToCompletion(*core));
  for (RequestId id = 1; id <= 4; ++id) {
    if (id == *preempted) continue;
    EXPECT_EQ(collector[id].final_event.finish_reason, CompletionReason::kLength);
  }
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
  EXPECT_TRUE(core->kv_cache().CheckInvariants().ok());
}

TEST(EngineAbortTest, AbortAllEndsEveryState) {
  EngineConfig config = SmallConfig();
  config.scheduler.max_num_seqs = 2;
  config.scheduler.max_num_batched_tokens = 8;
  auto core = NewCore(Stories(), config);
  Collector collector;
  for (RequestId id = 1; id <= 4; ++id) {
    ASSERT_TRUE(core->Add(id, Greedy(RandomPrompt(12, StoriesVocab(), static_cast<uint32_t>(id)),
                                     30, collector.Sink(id)))
                    .ok());
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(core->Step());
  core->AbortAll();
  for (RequestId id = 1; id <= 4; ++id) ExpectAborted(collector, id);
  EXPECT_FALSE(core->has_unfinished_requests());
  EXPECT_EQ(core->kv_cache().Stats().num_in_use_blocks, 0);
}

}  // namespace
}  // namespace tokenmill::testing
