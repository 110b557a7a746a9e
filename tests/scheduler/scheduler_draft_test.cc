// Speculative decoding: draft tokens are verified as extra rows with lookahead slots,
// rejected ones are rolled back, and the tokens are those of plain greedy decoding.
#include <gtest/gtest.h>

#include <vector>

#include "tests/scheduler/scheduler_sim.h"

namespace tokenmill::testing {
namespace scheduler_draft_test {

SchedulerConfig Config(int budget = 64, int max_model_len = 64) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = 8;
  config.max_model_len = max_model_len;
  return config;
}

// Proposes the reference's next `count` tokens, with the one at `wrong_index` (if any)
// replaced by another token.
Drafter ReferenceDrafter(int count, int wrong_index = -1) {
  return [=](RequestId, std::span<const TokenId> tokens) {
    std::vector<TokenId> drafts = ReferenceContinuation(tokens, count);
    if (wrong_index >= 0) drafts[wrong_index] = (drafts[wrong_index] + 1) % kVocabSize;
    return drafts;
  };
}

TEST(SchedulerDraftTest, AcceptedDraftsAddSeveralTokensPerStep) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  sim.set_drafter(ReferenceDrafter(2));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 4, 7)).ok());
  EXPECT_EQ(sim.Step(), "1:4");
  EXPECT_EQ(sim.Step(), "1:1+2");
  const ScheduledRequest& step = sim.last_output().requests.at(0);
  EXPECT_EQ(step.num_logits, 3);
  EXPECT_EQ(step.num_computed_tokens, 4);
  EXPECT_EQ(step.block_table.size(), 2u);  // positions 4..6: a lookahead block
  EXPECT_EQ(sim.last_events().at(0).new_token_ids.size(), 3u);
  EXPECT_EQ(sim.Step(), "1:1+2");
  EXPECT_EQ(sim.States(), "1:len");
  EXPECT_EQ(sim.streamed(1).size(), 7u);
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerDraftTest, RejectedDraftsAreRolledBack) {
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  sim.set_drafter(ReferenceDrafter(3, /*wrong_index=*/1));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 3, 9)).ok());
  EXPECT_EQ(sim.Step(), "1:3");
  EXPECT_EQ(sim.Step(), "1:1+3");
  // One accepted draft and the corrected token; the two rejected rows are not computed.
  EXPECT_EQ(sim.last_events().at(0).new_token_ids.size(), 2u);
  const Request* request = sim.scheduler().Find(1);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->num_tokens(), 3 + 3);
  EXPECT_EQ(request->num_computed_tokens, 5);
  // Block 1 holds rejected draft K/V at positions 5..6: its verified tokens are not all
  // computed, so it must not be in the prefix cache after the next allocation.
  EXPECT_EQ(sim.Step(), "1:1+3");
  const std::vector<BlockId> table = sim.last_output().requests.at(0).block_table;
  EXPECT_TRUE(sim.kv_cache().pool().block(table[0]).identity.has_value());
  EXPECT_FALSE(sim.kv_cache().pool().block(table[1]).identity.has_value());
  ASSERT_TRUE(sim.RunToCompletion(10));
  EXPECT_EQ(sim.streamed(1).size(), 9u);
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerDraftTest, LookaheadBlocksOfRejectedDraftsAreFreed) {
  // Block size 4: prompt 3 and a first token, then that token + 6 drafts at positions 3..9
  // (blocks 0-2); all drafts rejected, so 5 tokens stay (positions 0..4, the last one to
  // compute next step): block 2 goes back at once.
  SchedulerSim sim(Config(), MakeCacheConfig(16, 4));
  sim.set_drafter(ReferenceDrafter(6, /*wrong_index=*/0));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 3, 12)).ok());
  EXPECT_EQ(sim.Step(), "1:3");
  const int free_before = sim.kv_cache().Stats().num_free_blocks;
  EXPECT_EQ(sim.Step(), "1:1+6");
  EXPECT_EQ(sim.last_output().requests.at(0).block_table.size(), 3u);
  EXPECT_EQ(sim.last_events().at(0).new_token_ids.size(), 1u);
  EXPECT_EQ(sim.kv_cache().BlockTable(1).size(), 2u);
  EXPECT_EQ(sim.kv_cache().Stats().num_free_blocks, free_before - 1);
  EXPECT_TRUE(sim.scheduler().CheckInvariants().ok());
  ASSERT_TRUE(sim.RunToCompletion(20));
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);
  sim.ExpectReferenceOutputs();
}

TEST(SchedulerDraftTest, DraftsAreCappedByTheContextAndTheBudget) {
  SchedulerSim sim(Config(/*budget=*/64, /*max_model_len=*/8), MakeCacheConfig(16, 4));
  sim.set_drafter(ReferenceDrafter(3));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 4, 100)).ok());
  EXPECT_EQ(sim.Step(), "1:4");
  EXPECT_EQ(sim.Step(), "1:1+2");  // positions 5 and 6; 7 would be past the context
  EXPECT_EQ(sim.States(), "1:len");
  EXPECT_EQ(sim.streamed(1).size(), 4u);

  SchedulerSim small(Config(/*budget=*/2), MakeCacheConfig(16, 4));
  small.set_drafter(ReferenceDrafter(3));
  ASSERT_TRUE(small.Add(MakeRequest(1, 2, 5)).ok());
  EXPECT_EQ(small.Step(), "1:2");
  EXPECT_EQ(small.Step(), "1:1+1");
  small.ExpectReferenceOutputs();
}

TEST(SchedulerDraftTest, PreemptionDropsDraftsAndResumesWithTheSameTokens) {
  SchedulerSim sim(Config(), MakeCacheConfig(4, 4));
  sim.set_drafter(ReferenceDrafter(2, /*wrong_index=*/1));
  ASSERT_TRUE(sim.Add(MakeRequest(1, 4, 8)).ok());
  ASSERT_TRUE(sim.Add(MakeRequest(2, 4, 8)).ok());
  ASSERT_TRUE(sim.RunToCompletion(40));
  EXPECT_GT(sim.scheduler().Stats().num_preemptions, 0);
  EXPECT_EQ(sim.States(), "1:len 2:len");
  EXPECT_EQ(sim.kv_cache().Stats().num_in_use_blocks, 0);
  sim.ExpectReferenceOutputs();
}

}  // namespace scheduler_draft_test
}  // namespace tokenmill::testing
