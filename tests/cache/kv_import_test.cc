// The seam a tier below the pool uses: the prefix log (each distinct prefix stored and
// removed, with its block and prefix ids) and ImportPrefixBlocks (blocks brought back as
// cached prefix blocks that a request's admission then hits), with exact block ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace {

using testing::Blocks;
using testing::Concat;
using ::testing::ElementsAre;
using testing::TestRequest;

constexpr int kBlockSize = 4;

#define EXPECT_INVARIANTS(manager) EXPECT_EQ((manager).CheckInvariants().ToString(), "OK")

class KvImportTest : public ::testing::Test {
 protected:
  KvImportTest() : manager_(testing::CacheConfig(8, kBlockSize, /*watermark_blocks=*/1)) {
    manager_.set_prefix_log(&log_);
  }
  // Computes a request's prompt and frees it, leaving its full blocks cached.
  void Compute(TestRequest& r) {
    ASSERT_TRUE(manager_.AllocateSlots(r.view(), static_cast<int>(r.tokens.size())).has_value());
    r.num_computed_tokens = static_cast<int>(r.tokens.size());
    manager_.Free(r.view());
  }

  KvCacheManager manager_;
  std::vector<PrefixChange> log_;
};

TEST_F(KvImportTest, PrefixLogNamesEachDistinctPrefixOnceWithItsChain) {
  TestRequest a(0, Concat(Blocks(2, kBlockSize, 10), {7}));
  Compute(a);
  ASSERT_EQ(log_.size(), 2u);
  EXPECT_TRUE(log_[0].stored);
  EXPECT_EQ(log_[0].block, 0);
  EXPECT_EQ(log_[0].parent_prefix_id, kEmptyPrefix);
  EXPECT_THAT(log_[0].tokens, ElementsAre(10, 10, 10, 10));
  EXPECT_EQ(log_[1].block, 1);
  EXPECT_EQ(log_[1].parent_prefix_id, log_[0].prefix_id);
  EXPECT_EQ(log_[1].parent_hash, log_[0].hash);

  // A second copy of the same prefix (computed beside the first, not hit) logs nothing.
  log_.clear();
  TestRequest b(1, a.tokens);
  TestRequest c(2, a.tokens);
  ASSERT_TRUE(manager_.AllocateSlots(b.view(), 1, 0, manager_.GetComputedBlocks(b.view())));
  ASSERT_TRUE(manager_.AllocateSlots(c.view(), 9).has_value());  // no hit taken: copies
  c.num_computed_tokens = 9;
  manager_.CacheComputedBlocks(c.view());
  EXPECT_TRUE(log_.empty());

  // Reset removes each distinct prefix once.
  manager_.Free(b.view());
  manager_.Free(c.view());
  ASSERT_TRUE(manager_.ResetPrefixCache());
  ASSERT_EQ(log_.size(), 2u);
  EXPECT_FALSE(log_[0].stored);
  EXPECT_FALSE(log_[1].stored);
  EXPECT_INVARIANTS(manager_);
}

TEST_F(KvImportTest, ImportedBlocksContinueTheHitAndAreFoundByAdmission) {
  TestRequest a(0, Concat(Blocks(1, kBlockSize, 10), {7}));
  Compute(a);  // block 0 holds the first block
  log_.clear();
  // A longer prompt: block 0 hits, its next two blocks come from below.
  TestRequest b(1, Concat(Blocks(3, kBlockSize, 10), {8}));
  std::vector<std::pair<int, BlockId>> filled;
  const int imported = manager_.ImportPrefixBlocks(b.view(), 3, [&](int index, BlockId block) {
    filled.emplace_back(index, block);
    return true;
  });
  EXPECT_EQ(imported, 2);
  // Fresh blocks come from the queue's front: block 1 (free) then 2.
  EXPECT_THAT(filled, ElementsAre(std::pair(1, 1), std::pair(2, 2)));
  ASSERT_EQ(log_.size(), 2u);
  EXPECT_EQ(log_[0].block, 1);
  EXPECT_EQ(log_[1].parent_prefix_id, log_[0].prefix_id);
  EXPECT_EQ(manager_.pool().num_in_use_blocks(), 0) << "nothing is held after an import";
  EXPECT_INVARIANTS(manager_);

  const PrefixHit hit = manager_.GetComputedBlocks(b.view());
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1, 2));
  EXPECT_EQ(hit.num_tokens, 12);
}

TEST_F(KvImportTest, ImportStopsAtAFailedFillAndKeepsTheWatermarkAndTheLastToken) {
  TestRequest b(1, Blocks(4, kBlockSize, 10));  // 16 tokens: the last block is computed again
  int calls = 0;
  EXPECT_EQ(manager_.ImportPrefixBlocks(b.view(), 9, [&](int, BlockId) { return ++calls < 3; }),
            2);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(manager_.pool().num_cached_evictable_blocks(), 2);
  EXPECT_EQ(manager_.GetComputedBlocks(b.view()).num_tokens, 8);
  EXPECT_INVARIANTS(manager_);

  // A pool with too few free blocks past the watermark imports only what fits.
  TestRequest big(2, Concat(Blocks(7, kBlockSize, 50), {1}));
  ASSERT_TRUE(manager_.AllocateSlots(big.view(), 20).has_value());  // 5 of 8 blocks held
  TestRequest c(3, Concat(Blocks(5, kBlockSize, 90), {1}));
  // 3 free (2 of them cached-evictable), 1 kept back: 2 can be imported.
  EXPECT_EQ(manager_.ImportPrefixBlocks(c.view(), 5, [](int, BlockId) { return true; }), 2);
  // Nothing past end_block.
  TestRequest d(4, Concat(Blocks(5, kBlockSize, 70), {1}));
  EXPECT_EQ(manager_.ImportPrefixBlocks(d.view(), 0, [](int, BlockId) { return true; }), 0);
  EXPECT_INVARIANTS(manager_);
}

}  // namespace
}  // namespace tokenmill
