// Table-driven scheduler tests: for each step, the exact batch (which requests, how many
// tokens each, in batch order) and every request's state after it. The fake runner checks
// each step's K/V reads, and at the end every request's tokens must be the reference
// continuation of its prompt (so preempted and prefix-hit requests produce the same tokens).
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "tests/scheduler/scheduler_sim.h"

namespace tokenmill::testing {
namespace scheduler_table_test {

struct TimedRequest {
  int before_step;  // 1-based: added just before this step
  NewRequest request;
};

struct TimedAbort {
  int before_step;
  RequestId id;
};

struct ExpectedStep {
  std::string batch;   // "id:tokens ..." (see SchedulerSim::Step)
  std::string states;  // "id:state ..." (see SchedulerSim::States)
};

struct TableCase {
  std::string name;
  SchedulerConfig config;
  KvCacheConfig cache;
  std::vector<TimedRequest> requests;
  std::vector<TimedAbort> aborts;
  std::vector<ExpectedStep> steps;
};

// gtest prints the case's name, not its bytes.
void PrintTo(const TableCase& test, std::ostream* os) { *os << test.name; }

SchedulerConfig Config(int budget, int max_num_seqs, int max_model_len = 64) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = max_num_seqs;
  config.max_model_len = max_model_len;
  config.max_queue = 16;
  return config;
}

// Ten tokens shared by the prefix-cache cases.
std::vector<TokenId> SharedPrefix(int length) {
  std::vector<TokenId> tokens;
  for (int i = 0; i < length; ++i) tokens.push_back(500 + i);
  return tokens;
}

std::vector<TokenId> WithSuffix(std::vector<TokenId> tokens, std::vector<TokenId> suffix) {
  tokens.insert(tokens.end(), suffix.begin(), suffix.end());
  return tokens;
}

std::vector<TableCase> Cases() {
  std::vector<TableCase> cases;
  cases.push_back({
      .name = "PlainDecode",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, 3, 3)}, {1, MakeRequest(2, 5, 2)}},
      .aborts = {},
      .steps = {{"1:3 2:5", "1:R 2:R"}, {"1:1 2:1", "1:R 2:len"}, {"1:1", "1:len 2:len"}},
  });
  cases.push_back({
      .name = "PrefillJoinsRunningDecode",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, 4, 4)}, {2, MakeRequest(2, 6, 2)}},
      .aborts = {},
      .steps = {{"1:4", "1:R"},
                {"1:1 2:6", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:len"},
                {"1:1", "1:len 2:len"}},
  });
  cases.push_back({
      .name = "ChunkedPrefillBesideDecode",
      .config = Config(8, 8),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, 2, 6)}, {2, MakeRequest(2, 20, 1)}},
      .aborts = {},
      .steps = {{"1:2", "1:R"},
                {"1:1 2:7", "1:R 2:R"},
                {"1:1 2:7", "1:R 2:R"},
                {"1:1 2:6", "1:R 2:len"},
                {"1:1", "1:R 2:len"},
                {"1:1", "1:len 2:len"}},
  });
  cases.push_back({
      .name = "TokenBudgetChunksTheSecondAdmission",
      .config = Config(8, 8),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, 6, 1)}, {1, MakeRequest(2, 6, 1)}},
      .aborts = {},
      .steps = {{"1:6 2:2", "1:len 2:R"}, {"2:4", "1:len 2:len"}},
  });
  cases.push_back({
      .name = "MaxNumSeqsHoldsTheThirdBack",
      .config = Config(64, 2),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, 3, 2)}, {1, MakeRequest(2, 3, 2)}, {1, MakeRequest(3, 3, 2)}},
      .aborts = {},
      .steps = {{"1:3 2:3", "1:R 2:R 3:W"},
                {"1:1 2:1", "1:len 2:len 3:W"},
                {"3:3", "1:len 2:len 3:R"},
                {"3:1", "1:len 2:len 3:len"}},
  });
  cases.push_back({
      .name = "PriorityThenArrival",
      .config = Config(64, 1),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, 2, 1, /*priority=*/1)},
                   {1, MakeRequest(2, 2, 1, /*priority=*/0)},
                   {1, MakeRequest(3, 2, 1, /*priority=*/0)}},
      .aborts = {},
      .steps = {{"2:2", "1:W 2:len 3:W"}, {"3:2", "1:W 2:len 3:len"}, {"1:2", "1:len 2:len 3:len"}},
  });
  // Request 1's two full prompt blocks are cached when it finishes; request 2 shares them
  // and computes only its last 3 prompt tokens.
  cases.push_back({
      .name = "PrefixHitAfterFinish",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, SharedPrefix(10), 1)},
                   {2, MakeRequest(2, WithSuffix(SharedPrefix(8), {7, 8, 9}), 1)}},
      .aborts = {},
      .steps = {{"1:10", "1:len"}, {"2:3", "1:len 2:len"}},
  });
  // Request 1's blocks are hashed at its next allocation, so request 2 admitted in that
  // same step already hits them while request 1 keeps decoding.
  cases.push_back({
      .name = "PrefixHitWhileRunning",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, SharedPrefix(9), 3)},
                   {2, MakeRequest(2, WithSuffix(SharedPrefix(8), {7, 8}), 2)}},
      .aborts = {},
      .steps = {{"1:9", "1:R"}, {"1:1 2:2", "1:R 2:R"}, {"1:1 2:1", "1:len 2:len"}},
  });
  // 4 blocks of 4: both requests grow until request 1 needs a fifth block; request 2 (same
  // priority, later) is preempted, keeps its prompt block cached, waits until request 1
  // finishes, then recomputes the 5 tokens after its cached prompt.
  cases.push_back({
      .name = "PreemptLatestThenResume",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(4, 4),
      .requests = {{1, MakeRequest(1, 4, 8)}, {1, MakeRequest(2, 4, 8)}},
      .aborts = {},
      .steps = {{"1:4 2:4", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1", "1:R 2:P"},
                {"1:1", "1:R 2:P"},
                {"1:1", "1:len 2:P"},
                {"2:5", "1:len 2:R"},
                {"2:1", "1:len 2:R"},
                {"2:1", "1:len 2:len"}},
  });
  // Request 3 waits for a sequence slot; preempted request 2 requeues ahead of it (same
  // priority, earlier arrival), and the queue is strict: request 3, which would fit, waits
  // behind it until request 1 is done.
  cases.push_back({
      .name = "PreemptedRequeuesAheadOfLaterArrivals",
      .config = Config(64, 2),
      .cache = MakeCacheConfig(4, 4),
      .requests = {{1, MakeRequest(1, 4, 8)}, {1, MakeRequest(2, 4, 8)}, {1, MakeRequest(3, 1, 1)}},
      .aborts = {},
      .steps = {{"1:4 2:4", "1:R 2:R 3:W"},
                {"1:1 2:1", "1:R 2:R 3:W"},
                {"1:1 2:1", "1:R 2:R 3:W"},
                {"1:1 2:1", "1:R 2:R 3:W"},
                {"1:1 2:1", "1:R 2:R 3:W"},
                {"1:1", "1:R 2:P 3:W"},
                {"1:1", "1:R 2:P 3:W"},
                {"1:1", "1:len 2:P 3:W"},
                {"2:5 3:1", "1:len 2:R 3:len"},
                {"2:1", "1:len 2:R 3:len"},
                {"2:1", "1:len 2:len 3:len"}},
  });
  // 5 blocks: request 2 preempts itself right after computing its second block; Free
  // caches that block, so on resumption it hits 8 tokens and recomputes only its last one.
  cases.push_back({
      .name = "PreemptedPrefixStaysCached",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(5, 4),
      .requests = {{1, MakeRequest(1, 4, 8)}, {1, MakeRequest(2, 4, 8)}},
      .aborts = {},
      .steps = {{"1:4 2:4", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1", "1:R 2:P"},
                {"1:1", "1:R 2:P"},
                {"1:1", "1:len 2:P"},
                {"2:1", "1:len 2:R"},
                {"2:1", "1:len 2:R"},
                {"2:1", "1:len 2:len"}},
  });
  // As above, with a more urgent one-token request waiting: the step that preempts admits
  // nobody (the freed blocks would be taken back at once); it is admitted the step after.
  cases.push_back({
      .name = "NoAdmissionInAStepThatPreempted",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(4, 4),
      .requests = {{1, MakeRequest(1, 4, 8)},
                   {1, MakeRequest(2, 4, 8)},
                   {6, MakeRequest(3, 1, 1, /*priority=*/-1)}},
      .aborts = {},
      .steps = {{"1:4 2:4", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1", "1:R 2:P 3:W"},
                {"1:1 3:1", "1:R 2:P 3:len"},
                {"1:1", "1:len 2:P 3:len"},
                {"2:9", "1:len 2:R 3:len"},
                {"2:1", "1:len 2:R 3:len"},
                {"2:1", "1:len 2:len 3:len"}},
  });
  // Request 2 (priority 0) needs a block after request 1 (priority 1) was already batched
  // this step: request 1 is taken out of the batch and preempted.
  cases.push_back({
      .name = "PreemptLowerPriorityAlreadyBatched",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(4, 4),
      .requests = {{1, MakeRequest(1, 2, 8, /*priority=*/1)},
                   {2, MakeRequest(2, 4, 8, /*priority=*/0)}},
      .aborts = {},
      .steps = {{"1:2", "1:R"},
                {"1:1 2:4", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"1:1 2:1", "1:R 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:len"},
                {"1:4", "1:R 2:len"},
                {"1:1", "1:len 2:len"}},
  });
  // 3 blocks of 4: the lower-priority request is the one that needs a block, so it
  // preempts itself; it resumes (its cached prompt block evicted meanwhile) once request 2
  // is done.
  cases.push_back({
      .name = "PreemptItself",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(3, 4),
      .requests = {{1, MakeRequest(1, 4, 8, /*priority=*/1)},
                   {1, MakeRequest(2, 4, 8, /*priority=*/0)}},
      .aborts = {},
      .steps = {{"2:4 1:4", "1:R 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:R"},
                {"2:1", "1:P 2:len"},
                {"1:5", "1:R 2:len"},
                {"1:1", "1:R 2:len"},
                {"1:1", "1:R 2:len"},
                {"1:1", "1:R 2:len"},
                {"1:1", "1:R 2:len"},
                {"1:1", "1:R 2:len"},
                {"1:1", "1:len 2:len"}},
  });
  // Request 1 is aborted in the middle of its prefill, request 2 while waiting.
  cases.push_back({
      .name = "AbortWaitingAndMidPrefill",
      .config = Config(4, 1),
      .cache = MakeCacheConfig(16, 4),
      .requests = {{1, MakeRequest(1, 10, 4)},
                   {1, MakeRequest(2, 3, 2)},
                   {1, MakeRequest(3, 3, 2)}},
      .aborts = {{2, 1}, {2, 2}},
      .steps = {{"1:4", "1:R 2:W 3:W"},
                {"3:3", "1:abort 2:abort 3:R"},
                {"3:1", "1:abort 2:abort 3:len"}},
  });
  // Request 3 is aborted while decoding, request 2 while preempted.
  cases.push_back({
      .name = "AbortDecodingAndPreempted",
      .config = Config(64, 8),
      .cache = MakeCacheConfig(4, 4),
      .requests = {{1, MakeRequest(1, 4, 8)}, {1, MakeRequest(2, 4, 8)}, {1, MakeRequest(3, 2, 8)}},
      .aborts = {{2, 3}, {8, 2}},
      .steps = {{"1:4 2:4 3:2", "1:R 2:R 3:R"},
                {"1:1 2:1", "1:R 2:R 3:abort"},
                {"1:1 2:1", "1:R 2:R 3:abort"},
                {"1:1 2:1", "1:R 2:R 3:abort"},
                {"1:1 2:1", "1:R 2:R 3:abort"},
                {"1:1", "1:R 2:P 3:abort"},
                {"1:1", "1:R 2:P 3:abort"},
                {"1:1", "1:len 2:abort 3:abort"}},
  });
  return cases;
}

class SchedulerTableTest : public ::testing::TestWithParam<TableCase> {};

TEST_P(SchedulerTableTest, BatchesAndStatesStepByStep) {
  const TableCase& test = GetParam();
  SchedulerSim sim(test.config, test.cache);
  for (int step = 1; step <= static_cast<int>(test.steps.size()); ++step) {
    for (const TimedRequest& timed : test.requests) {
      if (timed.before_step == step) {
        ASSERT_TRUE(sim.Add(timed.request).ok());
      }
    }
    for (const TimedAbort& abort : test.aborts) {
      if (abort.before_step == step) {
        ASSERT_TRUE(sim.Abort(abort.id).ok());
      }
    }
    const ExpectedStep& expected = test.steps[step - 1];
    EXPECT_EQ(sim.Step(), expected.batch) << "batch of step " << step;
    EXPECT_EQ(sim.States(), expected.states) << "states after step " << step;
  }
  EXPECT_FALSE(sim.scheduler().has_unfinished_requests());
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0) << "blocks leaked";
  sim.ExpectReferenceOutputs();
}

INSTANTIATE_TEST_SUITE_P(Steps, SchedulerTableTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<TableCase>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace scheduler_table_test
}  // namespace tokenmill::testing
