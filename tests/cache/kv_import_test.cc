// The seam a tier below the pool uses: the prefix log (each distinct prefix stored and
// removed, with its block and prefix ids) and ImportPrefixBlocks (blocks brought back as
// cached prefix blocks that a request's admission then hits), with exact block ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace kv_import_test {

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
  const int imported = manager_.ImportPrefixBlocks(
      b.view(), 3, [&](int index, std::span<const BlockId> blocks) {
        filled.emplace_back(index, blocks[0]);
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
  EXPECT_EQ(manager_.ImportPrefixBlocks(b.view(), 9,
                                        [&](int, std::span<const BlockId>) { return ++calls < 3; }),
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
  const auto fill_all = [](int, std::span<const BlockId>) { return true; };
  EXPECT_EQ(manager_.ImportPrefixBlocks(c.view(), 5, fill_all), 2);
  // Nothing past end_block.
  TestRequest d(4, Concat(Blocks(5, kBlockSize, 70), {1}));
  EXPECT_EQ(manager_.ImportPrefixBlocks(d.view(), 0, fill_all), 0);
  EXPECT_INVARIANTS(manager_);
}

// A model with sliding-window layers: group 1 (window 8 tokens, two blocks and a token) keeps
// its own pool, and a hit needs only its window's blocks there.
class KvImportSlidingTest : public ::testing::Test {
 protected:
  static KvCacheConfig Config() {
    KvCacheConfig config = testing::CacheConfig(16, kBlockSize, /*watermark_blocks=*/1);
    config.sliding_window = 8;
    config.sliding_num_blocks = 8;
    return config;
  }
  KvImportSlidingTest() : manager_(Config()) {}
  // Imports `r`'s blocks up to end_block, recording each fill's index and blocks.
  int Import(const TestRequest& r, int end_block) {
    return manager_.ImportPrefixBlocks(r.view(), end_block,
                                       [&](int index, std::span<const BlockId> blocks) {
                                         EXPECT_EQ(blocks.size(), 2u);
                                         fills_.push_back({index, blocks[0], blocks[1]});
                                         return true;
                                       });
  }

  struct Fill {
    int index;
    BlockId group0;
    BlockId group1;
    bool operator==(const Fill&) const = default;
  };
  KvCacheManager manager_;
  std::vector<Fill> fills_;
};

TEST_F(KvImportSlidingTest, AnImportIntoEmptyPoolsFillsGroupOneOnlyInTheWindow) {
  TestRequest r(0, Concat(Blocks(6, kBlockSize, 10), {7}));  // 25 tokens: 6 blocks looked up
  EXPECT_EQ(Import(r, 6), 6);
  // Token 24's window is tokens 17-24: group 1 needs blocks 4 and 5, not 0-3.
  ASSERT_EQ(fills_.size(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fills_[i].group1, kReleasedBlock) << i;
  EXPECT_NE(fills_[4].group1, kReleasedBlock);
  EXPECT_NE(fills_[5].group1, kReleasedBlock);
  EXPECT_EQ(manager_.pool(0).num_in_use_blocks(), 0);
  EXPECT_EQ(manager_.pool(1).num_in_use_blocks(), 0);
  EXPECT_INVARIANTS(manager_);

  const PrefixHit hit = manager_.GetComputedBlocks(r.view());
  EXPECT_EQ(hit.num_tokens, 24);
  std::vector<BlockId> group0;
  for (const Fill& fill : fills_) group0.push_back(fill.group0);
  EXPECT_EQ(hit.blocks, group0);
  EXPECT_THAT(hit.sliding_blocks, ElementsAre(kReleasedBlock, kReleasedBlock, kReleasedBlock,
                                              kReleasedBlock, fills_[4].group1, fills_[5].group1));
  // Admission takes the hit and computes the last token.
  ASSERT_TRUE(manager_.AllocateSlots(r.view(), 1, 0, hit).has_value());
  EXPECT_INVARIANTS(manager_);
}

TEST_F(KvImportSlidingTest, GroupOneWindowBlocksInsideTheHitAreFilledAndGroupZeroIsKept) {
  // A computed prompt of 3 blocks; other traffic then evicts group 1's copies of its blocks 1
  // and 2, so group 0 still caches all three but the hit stops at one block.
  TestRequest a(0, Concat(Blocks(3, kBlockSize, 10), {7}));
  ASSERT_TRUE(manager_.AllocateSlots(a.view(), 13).has_value());
  a.num_computed_tokens = 13;
  const std::vector<BlockId> a_blocks(manager_.BlockTable(0).begin(),
                                      manager_.BlockTable(0).begin() + 3);
  manager_.Free(a.view());
  TestRequest other(1, Blocks(7, kBlockSize, 90));
  ASSERT_TRUE(manager_.AllocateSlots(other.view(), 28).has_value());
  manager_.Free(other.view());  // nothing computed: nothing cached
  TestRequest b(2, Concat(Blocks(4, kBlockSize, 10), {8}));  // a's 3 blocks and 1 more
  ASSERT_EQ(manager_.FindComputedBlocks(b.view()).num_tokens, 4);

  EXPECT_EQ(Import(b, 4), 2);
  // Token 16's window (9-16) needs group 1's blocks 2 and 3: block 2's group-0 copy is a's,
  // kept; block 3 is new in both groups; block 1 lies before the window.
  ASSERT_EQ(fills_.size(), 2u);
  EXPECT_EQ(fills_[0].index, 2);
  EXPECT_EQ(fills_[0].group0, kReleasedBlock);
  EXPECT_NE(fills_[0].group1, kReleasedBlock);
  EXPECT_EQ(fills_[1].index, 3);
  EXPECT_NE(fills_[1].group0, kReleasedBlock);
  EXPECT_NE(fills_[1].group1, kReleasedBlock);
  EXPECT_INVARIANTS(manager_);
  const PrefixHit hit = manager_.GetComputedBlocks(b.view());
  EXPECT_EQ(hit.num_tokens, 16);
  EXPECT_THAT(hit.blocks, ElementsAre(a_blocks[0], a_blocks[1], a_blocks[2], fills_[1].group0));
  EXPECT_THAT(hit.sliding_blocks,
              ElementsAre(kReleasedBlock, kReleasedBlock, fills_[0].group1, fills_[1].group1));
}

TEST_F(KvImportSlidingTest, AFullGroupOnePoolImportsGroupZeroAlone) {
  TestRequest big(0, Blocks(7, kBlockSize, 90));
  ASSERT_TRUE(manager_.AllocateSlots(big.view(), 28).has_value());  // 7 of 8 group-1 blocks
  TestRequest r(1, Concat(Blocks(4, kBlockSize, 10), {7}));
  EXPECT_EQ(Import(r, 4), 4);
  for (const Fill& fill : fills_) EXPECT_EQ(fill.group1, kReleasedBlock);
  EXPECT_EQ(manager_.FindComputedBlocks(r.view()).num_tokens, 0) << "no window, no hit";
  EXPECT_INVARIANTS(manager_);
}

}  // namespace kv_import_test
}  // namespace tokenmill
