// KvCacheManager::Fork, beam search's copy-on-write: a child shares its parent's full blocks
// by reference and gets a fresh block (to be copied into) for the partial last one only, in
// every KV group; the pool's invariants hold and every block comes back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace kv_fork_test {

using testing::Blocks;
using testing::Concat;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::TestRequest;

constexpr int kBlockSize = 4;

#define EXPECT_INVARIANTS(manager) EXPECT_EQ((manager).CheckInvariants().ToString(), "OK")

std::vector<BlockId> Table(const KvCacheManager& m, uint64_t id, int group = 0) {
  const auto table = m.BlockTable(id, group);
  return {table.begin(), table.end()};
}

// `r` computes all its tokens.
void ComputeAll(KvCacheManager& m, TestRequest& r) {
  const int n = static_cast<int>(r.tokens.size()) - r.num_computed_tokens;
  ASSERT_TRUE(m.AllocateSlots(r.view(), n).has_value());
  r.num_computed_tokens += n;
}

TEST(KvForkTest, SharesFullBlocksAndCopiesThePartialOne) {
  KvCacheManager m(testing::CacheConfig(10, kBlockSize));
  TestRequest parent(1, Concat(Blocks(2, kBlockSize, 10), {7, 8}));  // 2 full blocks + 2
  ComputeAll(m, parent);
  ASSERT_THAT(Table(m, 1), ElementsAre(0, 1, 2));
  const auto copies = m.Fork(parent.view(), 2);
  ASSERT_TRUE(copies.has_value());
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].group, 0);
  EXPECT_EQ((*copies)[0].src, 2);
  EXPECT_EQ((*copies)[0].dst, 3);
  EXPECT_THAT(Table(m, 2), ElementsAre(0, 1, 3));
  EXPECT_EQ(m.pool().block(0).ref_count, 2);
  EXPECT_EQ(m.pool().block(1).ref_count, 2);
  EXPECT_EQ(m.pool().block(2).ref_count, 1);
  // The shared blocks were cached on the way: a later prompt finds them.
  EXPECT_TRUE(m.pool().block(1).identity.has_value());
  EXPECT_EQ(m.Stats().num_in_use_blocks, 4);
  EXPECT_INVARIANTS(m);

  // Each goes its own way from the shared prefix.
  TestRequest child = parent;
  child.id = 2;
  parent.tokens.push_back(1);
  child.tokens.push_back(2);
  ComputeAll(m, parent);
  ComputeAll(m, child);
  for (int t = 0; t < 4; ++t) {
    parent.tokens.push_back(3);
    child.tokens.push_back(4);
    ComputeAll(m, parent);
    ComputeAll(m, child);
    EXPECT_INVARIANTS(m);
  }
  EXPECT_THAT(Table(m, 1), ElementsAre(0, 1, 2, 4));
  EXPECT_THAT(Table(m, 2), ElementsAre(0, 1, 3, 5));
  m.Free(parent.view());
  m.Free(child.view());
  EXPECT_EQ(m.Stats().num_in_use_blocks, 0);
  EXPECT_INVARIANTS(m);
}

TEST(KvForkTest, AtABlockBoundaryNothingIsCopied) {
  KvCacheManager m(testing::CacheConfig(10, kBlockSize));
  TestRequest parent(1, Blocks(3, kBlockSize, 10));
  ComputeAll(m, parent);
  const auto copies = m.Fork(parent.view(), 2);
  ASSERT_TRUE(copies.has_value());
  EXPECT_THAT(*copies, IsEmpty());
  EXPECT_THAT(Table(m, 2), ElementsAre(0, 1, 2));
  EXPECT_EQ(m.Stats().num_in_use_blocks, 3);
  EXPECT_INVARIANTS(m);
  m.Free(parent.view());
  EXPECT_EQ(m.Stats().num_in_use_blocks, 3);  // the child holds them all
  m.Free(TestRequest(2, parent.tokens).view());
  EXPECT_EQ(m.Stats().num_in_use_blocks, 0);
  EXPECT_INVARIANTS(m);
}

TEST(KvForkTest, NoFreeBlockForTheCopyChangesNothing) {
  KvCacheManager m(testing::CacheConfig(3, kBlockSize));
  TestRequest parent(1, Concat(Blocks(2, kBlockSize, 10), {7}));
  ComputeAll(m, parent);
  ASSERT_EQ(m.pool().num_free_blocks(), 0);
  EXPECT_FALSE(m.Fork(parent.view(), 2).has_value());
  EXPECT_THAT(Table(m, 2), IsEmpty());
  EXPECT_EQ(m.pool().block(0).ref_count, 1);
  EXPECT_INVARIANTS(m);
}

TEST(KvForkTest, WithoutPrefixCachingTheBlocksAreSharedUncached) {
  KvCacheConfig config = testing::CacheConfig(10, kBlockSize);
  config.enable_prefix_caching = false;
  KvCacheManager m(config);
  TestRequest parent(1, Concat(Blocks(1, kBlockSize, 10), {7, 8, 9}));
  ComputeAll(m, parent);
  const auto copies = m.Fork(parent.view(), 2);
  ASSERT_TRUE(copies.has_value());
  EXPECT_EQ(copies->size(), 1u);
  EXPECT_FALSE(m.pool().block(0).identity.has_value());
  EXPECT_EQ(m.pool().block(0).ref_count, 2);
  EXPECT_INVARIANTS(m);
}

TEST(KvForkTest, SlidingWindowGroupForksItsHeldBlocksAndCopiesItsPartialOne) {
  KvCacheConfig config = testing::CacheConfig(16, kBlockSize);
  config.sliding_window = 6;  // position p reads [p - 5, p]
  config.sliding_num_blocks = 8;
  KvCacheManager m(config);
  TestRequest parent(1, Blocks(3, kBlockSize, 10));
  ComputeAll(m, parent);
  for (const TokenId t : {1, 2}) {  // 14 tokens: position 14 reads [9, 14], blocks 2 and 3
    parent.tokens.push_back(t);
    ComputeAll(m, parent);
  }
  ASSERT_THAT(Table(m, 1, 1), ElementsAre(kReleasedBlock, kReleasedBlock, 2, 3));
  const auto copies = m.Fork(parent.view(), 2);
  ASSERT_TRUE(copies.has_value());
  ASSERT_EQ(copies->size(), 2u);
  EXPECT_EQ((*copies)[1].group, 1);
  EXPECT_EQ((*copies)[1].src, 3);
  const std::vector<BlockId> sliding = Table(m, 2, 1);
  ASSERT_EQ(sliding.size(), 4u);
  EXPECT_EQ(sliding[0], kReleasedBlock);
  EXPECT_EQ(sliding[1], kReleasedBlock);
  EXPECT_EQ(sliding[2], 2);
  EXPECT_EQ(sliding[3], (*copies)[1].dst);
  EXPECT_EQ(m.pool(1).block(2).ref_count, 2);
  EXPECT_EQ(m.pool(0).block(0).ref_count, 2);  // group 0 keeps and shares every block
  EXPECT_INVARIANTS(m);
  TestRequest child = parent;
  child.id = 2;
  for (int t = 0; t < 6; ++t) {
    parent.tokens.push_back(5);
    child.tokens.push_back(6);
    ComputeAll(m, parent);
    ComputeAll(m, child);
    EXPECT_INVARIANTS(m);
  }
  m.Free(parent.view());
  m.Free(child.view());
  EXPECT_EQ(m.pool(0).num_in_use_blocks(), 0);
  EXPECT_EQ(m.pool(1).num_in_use_blocks(), 0);
  EXPECT_INVARIANTS(m);
}

}  // namespace kv_fork_test
}  // namespace tokenmill
