// The canonical prefix-caching scenarios (share, diverge, free, revive, evict) with exact
// block ids and free-queue order, in the style of vLLM's test_prefix_caching.py.
#include "cache/kv_cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cache/block_hash.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace kv_cache_manager_test {

using testing::Blocks;
using testing::Concat;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::TestRequest;

constexpr int kBlockSize = 16;

KvCacheConfig Config(int num_blocks, int watermark_blocks = 0) {
  return testing::CacheConfig(num_blocks, kBlockSize, watermark_blocks);
}

std::vector<TokenId> Repeat(TokenId value, int count) { return std::vector<TokenId>(count, value); }

#define EXPECT_INVARIANTS(manager) EXPECT_EQ((manager).CheckInvariants().ToString(), "OK")

class KvCacheManagerTest : public ::testing::Test {
 protected:
  KvCacheManagerTest() : manager_(Config(10)) {}

  std::vector<BlockId> Table(const TestRequest& r) const {
    const auto table = manager_.BlockTable(r.id);
    return {table.begin(), table.end()};
  }
  std::vector<BlockId> Queue() const { return manager_.pool().FreeQueueIds(); }
  int RefCount(BlockId id) const { return manager_.pool().block(id).ref_count; }
  bool IsCached(BlockId id) const { return manager_.pool().block(id).identity.has_value(); }

  KvCacheManager manager_;
};

// kv_window eviction: the blocks past the sinks leave the table, cached ones included; a
// cached block still shared stays in use, the others become evictable (cached) or free.
TEST_F(KvCacheManagerTest, TruncateBlocksReleasesCachedAndUncachedTail) {
  TestRequest req0(0, Blocks(3, kBlockSize, 0));  // 48 tokens, 3 full blocks
  ASSERT_TRUE(manager_.AllocateSlots(req0.view(), 48 + 8).has_value());
  req0.num_computed_tokens = 48;
  manager_.CacheComputedBlocks(req0.view());
  EXPECT_THAT(Table(req0), ElementsAre(0, 1, 2, 3));
  // A second request shares the first two blocks.
  TestRequest req1(1, Concat(Blocks(2, kBlockSize, 0), Repeat(9, 3)));
  const PrefixHit hit = manager_.GetComputedBlocks(req1.view());
  ASSERT_THAT(hit.blocks, ElementsAre(0, 1));
  ASSERT_TRUE(manager_.AllocateSlots(req1.view(), 3, 0, hit).has_value());

  manager_.TruncateBlocks(req0.id, 1);
  EXPECT_THAT(Table(req0), ElementsAre(0));
  EXPECT_EQ(RefCount(0), 2);
  EXPECT_EQ(RefCount(1), 1) << "still held by req1";
  EXPECT_EQ(RefCount(2), 0);
  EXPECT_TRUE(IsCached(2)) << "its K/V were computed at their true positions";
  EXPECT_EQ(RefCount(3), 0);
  EXPECT_FALSE(IsCached(3));
  EXPECT_INVARIANTS(manager_);

  manager_.TruncateBlocks(req0.id, 0);
  EXPECT_THAT(Table(req0), IsEmpty());
  EXPECT_EQ(RefCount(0), 1);
  EXPECT_INVARIANTS(manager_);
}

TEST_F(KvCacheManagerTest, ShareFreeReviveEvict) {
  const std::vector<TokenId> common = Blocks(3, kBlockSize, 0);  // 48 tokens, 3 full blocks

  // A cold prompt of 55 tokens takes blocks 0..3 from the front of the queue.
  TestRequest req0(0, Concat(common, Repeat(3, 7)));
  PrefixHit hit = manager_.GetComputedBlocks(req0.view());
  EXPECT_THAT(hit.blocks, IsEmpty());
  EXPECT_EQ(hit.num_tokens, 0);
  EXPECT_THAT(*manager_.AllocateSlots(req0.view(), 55), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Queue(), ElementsAre(4, 5, 6, 7, 8, 9));
  EXPECT_FALSE(IsCached(0)) << "nothing is hashed before its K/V are computed";

  // Once computed, its three full blocks are cached with chained hashes.
  req0.num_computed_tokens = 55;
  manager_.CacheComputedBlocks(req0.view());
  BlockHash parent = kRootBlockHash;
  for (BlockId id : {0, 1, 2}) {
    const std::span<const TokenId> tokens(req0.tokens.data() + id * kBlockSize, kBlockSize);
    const BlockHash expected = HashBlockTokens(parent, tokens, "");
    ASSERT_TRUE(IsCached(id));
    EXPECT_EQ(manager_.pool().block(id).identity->hash, expected);
    EXPECT_EQ(manager_.pool().block(id).identity->parent_hash, parent);
    parent = expected;
  }
  EXPECT_FALSE(IsCached(3)) << "a partial block is never cached";
  EXPECT_INVARIANTS(manager_);

  // Share: the same 48-token prefix hits blocks 0..2; one fresh block for the rest.
  TestRequest req1(1, Concat(common, Repeat(5, 5)));
  hit = manager_.GetComputedBlocks(req1.view());
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1, 2));
  EXPECT_EQ(hit.num_tokens, 48);
  EXPECT_THAT(*manager_.AllocateSlots(req1.view(), 5, 0, hit), ElementsAre(4));
  EXPECT_THAT(Table(req1), ElementsAre(0, 1, 2, 4));
  EXPECT_EQ(RefCount(0), 2);
  EXPECT_EQ(RefCount(2), 2);
  EXPECT_EQ(RefCount(3), 1);
  EXPECT_THAT(Queue(), ElementsAre(5, 6, 7, 8, 9));
  EXPECT_INVARIANTS(manager_);
  KvCacheStats stats = manager_.Stats();
  EXPECT_EQ(stats.prefix_query_tokens, 55 + 53);
  EXPECT_EQ(stats.prefix_hit_tokens, 48);
  EXPECT_EQ(stats.num_in_use_blocks, 5);
  EXPECT_DOUBLE_EQ(stats.usage, 0.5);

  // Free, tail first: the uncached tail goes to the front, shared blocks stay in use.
  manager_.Free(req0.view());
  EXPECT_THAT(Queue(), ElementsAre(3, 5, 6, 7, 8, 9));
  EXPECT_EQ(RefCount(0), 1);
  req1.num_computed_tokens = 53;
  manager_.Free(req1.view());
  // Cached blocks go to the back, tail first, so the shared head is evicted last.
  EXPECT_THAT(Queue(), ElementsAre(4, 3, 5, 6, 7, 8, 9, 2, 1, 0));
  stats = manager_.Stats();
  EXPECT_EQ(stats.num_free_blocks, 7);
  EXPECT_EQ(stats.num_cached_evictable_blocks, 3);
  EXPECT_EQ(stats.num_in_use_blocks, 0);
  EXPECT_INVARIANTS(manager_);

  // Revive: a hit takes cached-evictable blocks out of the middle of the queue.
  TestRequest req2(2, Concat(common, Repeat(6, 7)));
  hit = manager_.GetComputedBlocks(req2.view());
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1, 2));
  EXPECT_THAT(*manager_.AllocateSlots(req2.view(), 7, 0, hit), ElementsAre(4));
  EXPECT_THAT(Queue(), ElementsAre(3, 5, 6, 7, 8, 9));
  EXPECT_EQ(manager_.Stats().num_cached_evictable_blocks, 0);
  EXPECT_INVARIANTS(manager_);
  req2.num_computed_tokens = 55;
  manager_.Free(req2.view());
  EXPECT_THAT(Queue(), ElementsAre(4, 3, 5, 6, 7, 8, 9, 2, 1, 0));

  // Evict: 8 fresh blocks take the 7 uncached ones, then the least recently used cached
  // block, which is the tail (2) of the common prefix, not its head.
  TestRequest req3(3, Blocks(8, kBlockSize, 100));
  EXPECT_THAT(manager_.GetComputedBlocks(req3.view()).blocks, IsEmpty());
  EXPECT_THAT(*manager_.AllocateSlots(req3.view(), 128), ElementsAre(4, 3, 5, 6, 7, 8, 9, 2));
  EXPECT_EQ(manager_.Stats().evictions, 1);
  EXPECT_FALSE(IsCached(2));
  EXPECT_THAT(Queue(), ElementsAre(1, 0));
  EXPECT_INVARIANTS(manager_);

  // The prefix now hits two blocks only. Taking them leaves no free block for the two more
  // the request needs: nothing is allocated and nothing changes.
  TestRequest req4(4, Concat(common, Repeat(7, 3)));
  hit = manager_.GetComputedBlocks(req4.view());
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1));
  EXPECT_EQ(manager_.AllocateSlots(req4.view(), 19, 0, hit), std::nullopt);
  EXPECT_THAT(Queue(), ElementsAre(1, 0));
  EXPECT_THAT(Table(req4), IsEmpty());
  EXPECT_EQ(RefCount(0), 0);
  EXPECT_INVARIANTS(manager_);

  // When req3 ends its 8 blocks are cached; req4 then evicts the LRU two of them.
  req3.num_computed_tokens = 128;
  manager_.Free(req3.view());
  EXPECT_THAT(Queue(), ElementsAre(1, 0, 2, 9, 8, 7, 6, 5, 3, 4));
  hit = manager_.GetComputedBlocks(req4.view());
  EXPECT_THAT(*manager_.AllocateSlots(req4.view(), 19, 0, hit), ElementsAre(2, 9));
  EXPECT_THAT(Table(req4), ElementsAre(0, 1, 2, 9));
  EXPECT_THAT(Queue(), ElementsAre(8, 7, 6, 5, 3, 4));
  EXPECT_EQ(manager_.Stats().evictions, 3);
  EXPECT_INVARIANTS(manager_);
}

TEST_F(KvCacheManagerTest, DivergingPromptsShareOnlyTheCommonBlocks) {
  TestRequest a(1, Concat(Blocks(3, kBlockSize, 0), {9}));
  EXPECT_THAT(*manager_.AllocateSlots(a.view(), 49), ElementsAre(0, 1, 2, 3));
  a.num_computed_tokens = 49;
  manager_.CacheComputedBlocks(a.view());

  // Same first two blocks, then a different third block.
  TestRequest b(2, Concat(Concat(Blocks(2, kBlockSize, 0), Repeat(50, 16)), Repeat(51, 4)));
  PrefixHit hit = manager_.GetComputedBlocks(b.view());
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1));
  EXPECT_THAT(*manager_.AllocateSlots(b.view(), 20, 0, hit), ElementsAre(4, 5));
  EXPECT_THAT(Table(b), ElementsAre(0, 1, 4, 5));
  b.num_computed_tokens = 52;
  manager_.CacheComputedBlocks(b.view());
  EXPECT_TRUE(IsCached(4));
  EXPECT_FALSE(IsCached(5));
  EXPECT_EQ(manager_.pool().block(4).identity->parent_hash,
            manager_.pool().block(1).identity->hash);
  EXPECT_INVARIANTS(manager_);

  // A third prompt follows b's branch.
  TestRequest c(3, Concat(Concat(Blocks(2, kBlockSize, 0), Repeat(50, 16)), Repeat(52, 17)));
  EXPECT_THAT(manager_.GetComputedBlocks(c.view()).blocks, ElementsAre(0, 1, 4));

  // Blocks equal to cached ones but after a different first block are no hit: the key is
  // the whole prefix, not the block alone.
  TestRequest d(4, Concat(Repeat(99, 16), Blocks(2, kBlockSize, 1)));
  EXPECT_THAT(manager_.GetComputedBlocks(d.view()).blocks, IsEmpty());
}

TEST_F(KvCacheManagerTest, AFullyCachedPromptStillComputesItsLastToken) {
  TestRequest a(1, Blocks(3, kBlockSize, 0));
  ASSERT_TRUE(manager_.AllocateSlots(a.view(), 48).has_value());
  a.num_computed_tokens = 48;
  manager_.Free(a.view());
  EXPECT_EQ(manager_.Stats().num_cached_evictable_blocks, 3) << "Free caches what was computed";

  TestRequest b(2, Blocks(3, kBlockSize, 0));
  const PrefixHit hit = manager_.GetComputedBlocks(b.view());
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1));
  EXPECT_EQ(hit.num_tokens, 32);
  // The last block is recomputed into a fresh block; the cached copy (2) stays evictable.
  EXPECT_THAT(*manager_.AllocateSlots(b.view(), 16, 0, hit), ElementsAre(3));
  b.num_computed_tokens = 48;
  manager_.Free(b.view());
  EXPECT_TRUE(IsCached(3)) << "a second copy of a cached prefix is cached too";
  EXPECT_INVARIANTS(manager_);
}

TEST_F(KvCacheManagerTest, DraftAndLookaheadSlotsAreNeverHashed) {
  TestRequest r(1, Blocks(2, kBlockSize, 0));
  // 32 prompt tokens plus 16 lookahead slots for drafts: 3 blocks.
  EXPECT_THAT(*manager_.AllocateSlots(r.view(), 32, 16), ElementsAre(0, 1, 2));
  r.num_computed_tokens = 32;
  manager_.CacheComputedBlocks(r.view());
  EXPECT_TRUE(IsCached(1));
  EXPECT_FALSE(IsCached(2));

  // 48 tokens computed, but 3 of them are unverified drafts: block 2 stays unhashed.
  r.tokens = Concat(r.tokens, Repeat(7, 13));
  r.num_computed_tokens = 48;
  manager_.CacheComputedBlocks(r.view());
  EXPECT_FALSE(IsCached(2));
  EXPECT_INVARIANTS(manager_);

  // The drafts are accepted: now block 2 holds 16 verified, computed tokens.
  r.tokens = Concat(r.tokens, Repeat(7, 3));
  manager_.CacheComputedBlocks(r.view());
  EXPECT_TRUE(IsCached(2));
  EXPECT_INVARIANTS(manager_);
}

TEST_F(KvCacheManagerTest, RunningRequestsGrowOneBlockAtATime) {
  TestRequest r(1, Repeat(1, 15));
  EXPECT_THAT(*manager_.AllocateSlots(r.view(), 15), ElementsAre(0));
  for (int step = 0; step < 18; ++step) {
    r.num_computed_tokens = static_cast<int>(r.tokens.size());
    r.tokens.push_back(2);  // the sampled token, computed next step
    const std::optional<std::vector<BlockId>> fresh = manager_.AllocateSlots(r.view(), 1);
    ASSERT_TRUE(fresh.has_value());
    // A new block exactly when the token lands at offset 0 of a block.
    EXPECT_EQ(fresh->size(), (r.tokens.size() - 1) % kBlockSize == 0 ? 1u : 0u) << step;
  }
  EXPECT_THAT(Table(r), ElementsAre(0, 1, 2));
  EXPECT_INVARIANTS(manager_);
}

TEST(KvCacheManagerWatermarkTest, AdmissionKeepsTheWatermarkFreeButRunningRequestsMayUseIt) {
  KvCacheManager manager(Config(10, /*watermark_blocks=*/2));
  TestRequest big(1, Repeat(1, 144));
  EXPECT_EQ(manager.AllocateSlots(big.view(), 144), std::nullopt) << "9 + 2 > 10";
  TestRequest a(2, Repeat(1, 128));
  ASSERT_TRUE(manager.AllocateSlots(a.view(), 128).has_value());
  EXPECT_EQ(manager.pool().num_free_blocks(), 2);
  a.num_computed_tokens = 128;
  a.tokens.push_back(5);
  EXPECT_TRUE(manager.AllocateSlots(a.view(), 1).has_value()) << "running: may dip in";
  TestRequest b(3, Repeat(2, 4));
  EXPECT_EQ(manager.AllocateSlots(b.view(), 4), std::nullopt);
  EXPECT_THAT(manager.BlockTable(b.id), IsEmpty());
  EXPECT_INVARIANTS(manager);
}

TEST_F(KvCacheManagerTest, ResetPrefixCacheOnlyWhenIdleAndResetDropsEverything) {
  TestRequest a(1, Blocks(3, kBlockSize, 0));
  ASSERT_TRUE(manager_.AllocateSlots(a.view(), 48).has_value());
  a.num_computed_tokens = 48;
  manager_.CacheComputedBlocks(a.view());
  EXPECT_FALSE(manager_.ResetPrefixCache()) << "blocks are in use";
  EXPECT_TRUE(IsCached(0));
  manager_.Free(a.view());
  EXPECT_TRUE(manager_.ResetPrefixCache());
  EXPECT_EQ(manager_.Stats().num_cached_evictable_blocks, 0);
  EXPECT_THAT(Queue(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));

  // Reset drops tables and cache even with requests running, and keeps the counters.
  a.num_computed_tokens = 0;
  TestRequest b(2, Blocks(9, kBlockSize, 0));
  ASSERT_TRUE(manager_.AllocateSlots(a.view(), 48).has_value());
  a.num_computed_tokens = 48;
  manager_.CacheComputedBlocks(a.view());
  (void)manager_.GetComputedBlocks(b.view());
  const KvCacheStats before = manager_.Stats();
  EXPECT_EQ(before.prefix_hit_tokens, 48);
  manager_.Reset();
  EXPECT_THAT(Table(a), IsEmpty());
  EXPECT_THAT(Queue(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  const KvCacheStats after = manager_.Stats();
  EXPECT_EQ(after.num_free_blocks, 10);
  EXPECT_EQ(after.prefix_hit_tokens, before.prefix_hit_tokens);
  EXPECT_THAT(manager_.GetComputedBlocks(b.view()).blocks, IsEmpty());
  EXPECT_INVARIANTS(manager_);
}

TEST(KvCacheManagerNoCachingTest, WithoutPrefixCachingNothingIsHashedOrShared) {
  KvCacheConfig config = Config(4);
  config.enable_prefix_caching = false;
  KvCacheManager manager(config);
  TestRequest a(1, Blocks(2, kBlockSize, 0));
  ASSERT_TRUE(manager.AllocateSlots(a.view(), 32).has_value());
  a.num_computed_tokens = 32;
  manager.Free(a.view());
  EXPECT_THAT(manager.pool().FreeQueueIds(), ElementsAre(0, 1, 2, 3));
  TestRequest b(2, Blocks(3, kBlockSize, 0));
  EXPECT_THAT(manager.GetComputedBlocks(b.view()).blocks, IsEmpty());
  EXPECT_EQ(manager.Stats().prefix_query_tokens, 0);
  EXPECT_INVARIANTS(manager);
}

TEST(BlockPoolInvariantsTest, ReportRefCountsThatDisagreeWithTheTables) {
  BlockPool pool(4, kBlockSize);
  EXPECT_THAT(pool.AllocateFresh(2), ElementsAre(0, 1));
  const std::vector<int> right = {1, 1, 0, 0};
  EXPECT_TRUE(pool.CheckInvariants(right).ok());
  const std::vector<int> wrong = {1, 2, 0, 0};
  const Status status = pool.CheckInvariants(wrong);
  EXPECT_EQ(status.message(), "block 1 has ref count 1 but 2 block tables hold it");
}

TEST(BlockPoolDeathTest, TakingMoreBlocksThanAreFreeIsAProgrammerError) {
  BlockPool pool(2, kBlockSize);
  EXPECT_DEATH(pool.AllocateFresh(3), "asked for 3 blocks with 2 free");
  const std::vector<BlockId> ids = {0};
  EXPECT_DEATH(pool.Release(ids), "released more often than taken");
}

}  // namespace kv_cache_manager_test
}  // namespace tokenmill
