// Beam search's scheduler side: Update parks a request it gets no token for, Fork copies a
// parked request (sharing its KV blocks, the partial one copied before the next step that
// runs), Extend gives a parked request its next token; parked requests hold no seat from a
// waiting one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/scheduler/scheduler_sim.h"

namespace tokenmill::testing {
namespace scheduler_fork_test {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class SchedulerForkTest : public ::testing::Test {
 protected:
  explicit SchedulerForkTest(int max_num_seqs = 8)
      : kv_(MakeCacheConfig(16, 4)), scheduler_(Config(max_num_seqs), kv_) {}

  static SchedulerConfig Config(int max_num_seqs) {
    SchedulerConfig config;
    config.max_num_batched_tokens = 64;
    config.max_num_seqs = max_num_seqs;
    config.max_model_len = 64;
    return config;
  }

  static SampledTokens Sampled(RequestId id, std::vector<TokenId> tokens) {
    SampledTokens sampled;
    sampled.id = id;
    sampled.token_ids = std::move(tokens);
    return sampled;
  }

  // One step in which every request with logits gets no token: they park.
  SchedulerOutput StepParking() {
    SchedulerOutput out = scheduler_.Schedule();
    ModelOutput parked;
    for (const ScheduledRequest& r : out.requests) {
      if (r.num_logits > 0) parked.requests.push_back(Sampled(r.id, {}));
    }
    EXPECT_THAT(scheduler_.Update(parked), IsEmpty());
    EXPECT_TRUE(scheduler_.CheckInvariants().ok()) << scheduler_.CheckInvariants().ToString();
    return out;
  }

  std::vector<BlockId> Table(RequestId id) const {
    const auto table = kv_.BlockTable(id);
    return {table.begin(), table.end()};
  }

  void Extend(RequestId id, TokenId token) {
    const auto stopped = scheduler_.Extend(id, token);
    ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
    EXPECT_FALSE(stopped->has_value());
  }

  KvCacheManager kv_;
  Scheduler scheduler_;
};

TEST_F(SchedulerForkTest, ParkedRequestsForkAndGoOnWithTheirOwnTokens) {
  ASSERT_TRUE(scheduler_.Add(MakeRequest(1, 6, 10)).ok());
  EXPECT_EQ(StepParking().requests.size(), 1u);
  EXPECT_TRUE(scheduler_.Find(1)->parked);
  EXPECT_TRUE(scheduler_.Schedule().empty());  // nothing to compute till its next token

  ASSERT_TRUE(scheduler_.Fork(1, 2).ok());
  EXPECT_EQ(scheduler_.Fork(1, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler_.Fork(9, 3).code(), StatusCode::kNotFound);
  const std::vector<BlockId> parent = Table(1);
  const std::vector<BlockId> child = Table(2);
  ASSERT_EQ(parent.size(), 2u);  // one full block of 4 and 2 tokens
  ASSERT_EQ(child.size(), 2u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_NE(child[1], parent[1]);
  EXPECT_EQ(scheduler_.Find(2)->num_computed_tokens, 6);
  EXPECT_EQ(scheduler_.Stats().num_running, 2);

  Extend(1, 100);
  Extend(2, 200);
  const SchedulerOutput out = scheduler_.Schedule();
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_THAT(out.requests[0].token_ids, ElementsAre(100));
  EXPECT_THAT(out.requests[1].token_ids, ElementsAre(200));
  EXPECT_EQ(out.requests[1].num_computed_tokens, 6);
  ASSERT_EQ(out.block_copies.size(), 1u);
  EXPECT_EQ(out.block_copies[0].src, parent[1]);
  EXPECT_EQ(out.block_copies[0].dst, child[1]);
  const std::vector<RequestEvent> events = scheduler_.Update(
      ModelOutput{.requests = {Sampled(1, {5}), Sampled(2, {6})}});
  EXPECT_EQ(events.size(), 2u);
  EXPECT_TRUE(scheduler_.Schedule().block_copies.empty());  // copied once
}

TEST_F(SchedulerForkTest, CopiesWaitForAStepThatRuns) {
  ASSERT_TRUE(scheduler_.Add(MakeRequest(1, 5, 10)).ok());
  StepParking();
  ASSERT_TRUE(scheduler_.Fork(1, 2).ok());
  EXPECT_TRUE(scheduler_.Schedule().empty());  // both parked: nothing runs, nothing copied
  Extend(1, 100);
  Extend(2, 200);
  EXPECT_EQ(scheduler_.Schedule().block_copies.size(), 1u);
}

TEST_F(SchedulerForkTest, ExtendingToMaxTokensFinishes) {
  ASSERT_TRUE(scheduler_.Add(MakeRequest(1, 5, 1)).ok());
  StepParking();
  const auto stopped = scheduler_.Extend(1, 100);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(*stopped, FinishReason::kLength);
  EXPECT_EQ(scheduler_.Find(1), nullptr);
  EXPECT_EQ(kv_.Stats().num_in_use_blocks, 0);
}

class SchedulerForkOneSeatTest : public SchedulerForkTest {
 protected:
  SchedulerForkOneSeatTest() : SchedulerForkTest(/*max_num_seqs=*/1) {}
};

TEST_F(SchedulerForkOneSeatTest, AForkWithoutASeatWaitsAndParkedOnesGiveWay) {
  ASSERT_TRUE(scheduler_.Add(MakeRequest(1, 6, 10)).ok());
  StepParking();
  ASSERT_TRUE(scheduler_.Fork(1, 2).ok());
  EXPECT_EQ(scheduler_.Find(2)->state, RequestState::kPreempted);
  EXPECT_THAT(Table(2), IsEmpty());
  EXPECT_TRUE(scheduler_.Schedule().empty());  // the fork is parked too: it waits
  Extend(2, 200);
  // The parked request 1 gives its seat to request 2, which recomputes from the cached
  // full block.
  SchedulerOutput out = StepParking();
  ASSERT_EQ(out.requests.size(), 1u);
  EXPECT_EQ(out.requests[0].id, 2u);
  EXPECT_EQ(out.requests[0].num_computed_tokens, 4);
  EXPECT_THAT(out.preempted_ids, ElementsAre(1));
  EXPECT_TRUE(scheduler_.Find(1)->parked);
  Extend(1, 100);
  out = StepParking();
  ASSERT_EQ(out.requests.size(), 1u);
  EXPECT_EQ(out.requests[0].id, 1u);
  EXPECT_EQ(out.requests[0].num_computed_tokens, 4);  // its prompt's full block is cached
  EXPECT_THAT(out.requests[0].token_ids, ::testing::SizeIs(3));
  EXPECT_EQ(out.requests[0].token_ids.back(), 100);
}

}  // namespace scheduler_fork_test
}  // namespace tokenmill::testing
