// ValidateForwardInput: a step's batch carries the block tables of each of the model's KV
// groups.
#include "model/forward_input.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "model/kv_cache.h"

namespace tokenmill {
namespace {

TEST(ValidateForwardInputTest, TheBatchHasTheBlockTablesOfEachKvGroup) {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.n_vocab = 10;
  c.context_length = 64;
  KvCacheStorage storage(c, KvType::kF32, 4, 4);
  BatchBuilder builder(4, 4);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  ASSERT_TRUE(builder.Append(builder.AddSequence(), tokens, BatchBuilder::Logits::kLast).ok());
  ForwardInput in{builder.token_ids(), builder.batch(), builder.logit_rows()};
  ASSERT_EQ(NumKvGroups(c), 1);
  EXPECT_EQ(KvGroupOfLayer(c, 1), 0);
  EXPECT_TRUE(ValidateForwardInput(c, in, storage.view(), 10).ok());

  const std::array<KvBlockTable, 2> two = {in.batch.block_tables[0], in.batch.block_tables[0]};
  in.batch.block_tables = two;
  const Status s = ValidateForwardInput(c, in, storage.view(), 10);
  EXPECT_NE(s.message().find("block tables for 2 KV groups; the model has 1"), std::string::npos)
      << s.ToString();
}

// Gemma-style layers: sliding-window layers form group 1 with a smaller pool, and each
// group's block ids are checked against its own pool.
TEST(ValidateForwardInputTest, SlidingWindowLayersFormGroupOneWithItsOwnPool) {
  ModelConfig c;
  c.n_layers = 4;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.n_vocab = 10;
  c.context_length = 64;
  c.sliding_window = 4;
  c.sliding_layers = {true, true, true, false};
  ASSERT_EQ(NumKvGroups(c), 2);
  EXPECT_EQ(KvGroupOfLayer(c, 0), 1);
  EXPECT_EQ(KvGroupOfLayer(c, 3), 0);
  EXPECT_EQ(NumLayersInKvGroup(c, 0), 1);
  EXPECT_EQ(NumLayersInKvGroup(c, 1), 3);

  const std::array<int64_t, 2> pools = {6, 2};
  KvCacheStorage storage(c, KvType::kF32, pools, 4);
  EXPECT_EQ(storage.view().Layer(0).num_blocks, 2);
  EXPECT_EQ(storage.view().Layer(3).num_blocks, 6);
  // Group 0's table takes blocks 0 and 1; group 1's the same ids, within its 2 blocks.
  BatchBuilder builder(4, 6, NumKvGroups(c));
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  ASSERT_TRUE(builder.Append(builder.AddSequence(), tokens, BatchBuilder::Logits::kLast).ok());
  ForwardInput in{builder.token_ids(), builder.batch(), builder.logit_rows()};
  ASSERT_EQ(in.batch.block_tables.size(), 2u);
  EXPECT_TRUE(ValidateForwardInput(c, in, storage.view(), 10).ok());

  // A group-1 block id past its 2-block pool (but inside group 0's 6) is refused.
  const std::vector<int32_t> far = {4, 5};
  const std::vector<int64_t> far_slots = {16, 17, 18, 19, 20};
  const KvBlockTable& group1 = in.batch.block_tables[1];
  const std::array<KvBlockTable, 2> tables = {
      in.batch.block_tables[0],
      KvBlockTable{far_slots, group1.kv_indptr, far, group1.kv_last_block_len}};
  in.batch.block_tables = tables;
  const Status s = ValidateForwardInput(c, in, storage.view(), 10);
  EXPECT_NE(s.message().find("KV group 1: block id 4 outside the pool of 2"), std::string::npos)
      << s.ToString();

  // Every layer sliding: one group that keeps everything.
  c.sliding_layers = {true, true, true, true};
  EXPECT_EQ(NumKvGroups(c), 1);
  EXPECT_EQ(KvGroupOfLayer(c, 0), 0);
}

}  // namespace
}  // namespace tokenmill
