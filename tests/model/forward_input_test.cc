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

}  // namespace
}  // namespace tokenmill
