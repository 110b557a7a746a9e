// BuildBatchInputs: each KV group's tables from the scheduled requests' tables; a released
// group-1 block points at block 0 (outside every window), a request without a group-1 table
// reads its group-0 table there.
#include "engine/batch_inputs.h"

#include <gtest/gtest.h>

#include <vector>

#include "cache/kv_cache_manager.h"

namespace tokenmill {
namespace {

std::vector<int32_t> Indices(const KvBlockTable& table) {
  return {table.kv_indices.begin(), table.kv_indices.end()};
}
std::vector<int64_t> Slots(const KvBlockTable& table) {
  return {table.slot_mapping.begin(), table.slot_mapping.end()};
}

TEST(BuildBatchInputsTest, EachKvGroupGetsItsRequestsTables) {
  SchedulerOutput step;
  ScheduledRequest decoding{.id = 1,
                            .num_computed_tokens = 9,
                            .num_new_tokens = 1,
                            .num_draft_tokens = 0,
                            .token_ids = {7},
                            .is_prefill = false,
                            .num_logits = 1,
                            .first_scheduled = false,
                            .block_table = {3, 4, 5},
                            .new_block_ids = {},
                            .sliding_block_table = {kReleasedBlock, 2, 1}};
  ScheduledRequest fresh = decoding;
  fresh.id = 2;
  fresh.num_computed_tokens = 0;
  fresh.token_ids = {1, 2};
  fresh.num_new_tokens = 2;
  fresh.block_table = {6};
  fresh.sliding_block_table = {};  // a pool that releases nothing, as a draft model's
  step.requests = {decoding, fresh};
  step.num_batched_tokens = 3;

  const BatchInputs in = BuildBatchInputs(step, 4, 2);
  const RaggedBatch batch = in.batch();
  ASSERT_EQ(batch.block_tables.size(), 2u);
  EXPECT_EQ(Indices(batch.block_tables[0]), (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(Indices(batch.block_tables[1]), (std::vector<int32_t>{0, 2, 1, 6}));
  // Position 9 is in block index 2: slot 5 * 4 + 1 in group 0, 1 * 4 + 1 in group 1.
  EXPECT_EQ(Slots(batch.block_tables[0]), (std::vector<int64_t>{21, 24, 25}));
  EXPECT_EQ(Slots(batch.block_tables[1]), (std::vector<int64_t>{5, 24, 25}));
  EXPECT_TRUE(ValidateRaggedBatch(batch, 4, std::vector<int64_t>{7, 7}).ok());

  const BatchInputs one = BuildBatchInputs(step, 4);
  EXPECT_EQ(one.batch().block_tables.size(), 1u);
}

}  // namespace
}  // namespace tokenmill
