// Stop conditions on token ids: EOS (unless ignore_eos), stop token ids, max_tokens and the
// context length. The stop token is streamed; nothing after it is.
#include <gtest/gtest.h>

#include <vector>

#include "tests/scheduler/scheduler_sim.h"

namespace tokenmill::testing {
namespace scheduler_stop_test {

SchedulerConfig Config(std::vector<TokenId> eos_token_ids = {}, int max_model_len = 64) {
  SchedulerConfig config;
  config.max_num_batched_tokens = 64;
  config.max_num_seqs = 8;
  config.max_model_len = max_model_len;
  config.eos_token_ids = std::move(eos_token_ids);
  return config;
}

// The third token the reference model generates after request 1's prompt of 4 tokens,
// checked to differ from the first two so that it stops exactly there.
TokenId ThirdToken() {
  const NewRequest request = MakeRequest(1, 4, 1);
  const std::vector<TokenId> tokens = ReferenceContinuation(request.prompt_token_ids, 3);
  EXPECT_NE(tokens[0], tokens[2]);
  EXPECT_NE(tokens[1], tokens[2]);
  return tokens[2];
}

TEST(SchedulerStopTest, EosStopsAndIsStreamed) {
  const TokenId eos = ThirdToken();
  SchedulerSim sim(Config({eos}), MakeCacheConfig(16, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 4, 10)).ok());
  ASSERT_TRUE(sim.RunToCompletion(10));
  EXPECT_EQ(sim.States(), "1:stop");
  ASSERT_EQ(sim.streamed(1).size(), 3u);
  EXPECT_EQ(sim.streamed(1).back(), eos);
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerStopTest, IgnoreEosRunsToMaxTokens) {
  SchedulerSim sim(Config({ThirdToken()}), MakeCacheConfig(16, 4));
  NewRequest request = MakeRequest(1, 4, 5);
  request.sampling.ignore_eos = true;
  ASSERT_TRUE(sim.Add(request).ok());
  ASSERT_TRUE(sim.RunToCompletion(10));
  EXPECT_EQ(sim.States(), "1:len");
  EXPECT_EQ(sim.streamed(1).size(), 5u);
}

TEST(SchedulerStopTest, StopTokenIdsStopEvenWithIgnoreEos) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  NewRequest request = MakeRequest(1, 4, 10);
  request.sampling.ignore_eos = true;
  request.sampling.stop_token_ids = {ThirdToken()};
  ASSERT_TRUE(sim.Add(request).ok());
  ASSERT_TRUE(sim.RunToCompletion(10));
  EXPECT_EQ(sim.States(), "1:stop");
  EXPECT_EQ(sim.streamed(1).size(), 3u);
}

TEST(SchedulerStopTest, ContextLengthEndsWithLength) {
  SchedulerSim sim(Config({}, /*max_model_len=*/8), MakeCacheConfig(16, 4));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 5, 100)).ok());
  ASSERT_TRUE(sim.RunToCompletion(10));
  EXPECT_EQ(sim.States(), "1:len");
  EXPECT_EQ(sim.streamed(1).size(), 3u);  // 5 + 3 = 8
}

}  // namespace scheduler_stop_test
}  // namespace tokenmill::testing
