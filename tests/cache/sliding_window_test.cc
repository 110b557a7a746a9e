// KV groups: a sliding-window group (group 1) releases the blocks wholly before the window of
// the next token to compute, while group 0 (full attention) keeps every block; a prefix hit
// holds in both groups; nothing leaks when a request ends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace sliding_window_test {

using testing::Blocks;
using testing::Concat;
using ::testing::ElementsAre;
using testing::TestRequest;

constexpr int kBlockSize = 4;
constexpr int kWindow = 8;  // a token at position p reads [p - 7, p]
constexpr BlockId kR = kReleasedBlock;

KvCacheConfig SlidingConfig(int num_blocks, int sliding_num_blocks, int watermark = 0) {
  KvCacheConfig config = testing::CacheConfig(num_blocks, kBlockSize, watermark);
  config.sliding_window = kWindow;
  config.sliding_num_blocks = sliding_num_blocks;
  return config;
}

#define EXPECT_INVARIANTS(manager) EXPECT_EQ((manager).CheckInvariants().ToString(), "OK")

std::vector<BlockId> Table(const KvCacheManager& m, uint64_t id, int group) {
  const auto table = m.BlockTable(id, group);
  return {table.begin(), table.end()};
}

// One step of `n` tokens for `r` (the scheduler's loop), then they count as computed.
bool Step(KvCacheManager& m, TestRequest& r, int n, int lookahead = 0) {
  if (!m.AllocateSlots(r.view(), n, lookahead).has_value()) return false;
  r.num_computed_tokens += n;
  return true;
}

TEST(SlidingWindowTest, DecodingReleasesBlocksBeforeTheWindow) {
  KvCacheManager m(SlidingConfig(16, 6));
  EXPECT_EQ(m.num_groups(), 2);
  TestRequest r(1, Blocks(3, kBlockSize, 100));  // 12 prompt tokens
  ASSERT_TRUE(Step(m, r, 12));
  EXPECT_THAT(Table(m, 1, 0), ElementsAre(0, 1, 2));
  EXPECT_THAT(Table(m, 1, 1), ElementsAre(0, 1, 2));
  // Position 12 reads [5, 12]: block 0 (positions 0-3) lies wholly before it.
  r.tokens.push_back(7);
  ASSERT_TRUE(Step(m, r, 1));
  EXPECT_THAT(Table(m, 1, 0), ElementsAre(0, 1, 2, 3));
  // Block 0 was cached (a full prompt block): it waits, evictable, at the back of the queue.
  EXPECT_THAT(Table(m, 1, 1), ElementsAre(kR, 1, 2, 3));
  EXPECT_TRUE(m.pool(1).block(0).identity.has_value());
  EXPECT_EQ(m.pool(1).num_cached_evictable_blocks(), 1);
  EXPECT_INVARIANTS(m);
  // Decoding on to position 23: [16, 23] needs blocks 4 and 5 only.
  for (int p = 13; p < 24; ++p) {
    r.tokens.push_back(p);
    ASSERT_TRUE(Step(m, r, 1));
    EXPECT_INVARIANTS(m);
  }
  EXPECT_EQ(m.BlockTable(1, 1).size(), 6u);
  EXPECT_EQ(m.pool(1).num_in_use_blocks(), 2);  // position 23 reads [16, 23]: blocks 4 and 5
  EXPECT_EQ(m.pool(0).num_in_use_blocks(), 6);  // full attention keeps all
  EXPECT_EQ(m.Stats().sliding_released_blocks, 4);
  m.Free(r.view());
  EXPECT_EQ(m.pool(0).num_in_use_blocks(), 0);
  EXPECT_EQ(m.pool(1).num_in_use_blocks(), 0);
  EXPECT_INVARIANTS(m);
}

// A finished request whose 24-token prompt is cached in both groups, then `evicting` fresh
// blocks of another request taken from group 1's free queue (evicting its LRU blocks).
class SlidingPrefixTest : public ::testing::Test {
 protected:
  SlidingPrefixTest() : m_(SlidingConfig(40, 12)), prompt_(Blocks(6, kBlockSize, 100)) {}

  void RunFirst(bool decode) {
    TestRequest a(1, prompt_);
    ASSERT_TRUE(Step(m_, a, 24));
    if (decode) {  // position 24 reads [17, 24]: blocks 0-3 go back, cached
      a.tokens.push_back(5);
      ASSERT_TRUE(Step(m_, a, 1));
      EXPECT_EQ(m_.pool(1).num_in_use_blocks(), 3);
    }
    m_.Free(a.view());
    EXPECT_INVARIANTS(m_);
  }
  void Evict(int num_blocks) {
    TestRequest d(2, Blocks(num_blocks, kBlockSize, 900));
    ASSERT_TRUE(m_.AllocateSlots(d.view(), num_blocks * kBlockSize).has_value());
    EXPECT_EQ(m_.pool(0).num_evictions(), 0);
    m_.Free(d.view());
  }

  KvCacheManager m_;
  std::vector<TokenId> prompt_;
};

TEST_F(SlidingPrefixTest, HitNeedsOnlyTheWindowInGroupOne) {
  RunFirst(/*decode=*/true);
  // Group 1's queue: 6 (uncached), 7-11, then cached 3, 2, 1, 0, 5, 4: ten blocks evict 0-3.
  Evict(10);
  EXPECT_EQ(m_.pool(1).num_evictions(), 4);
  TestRequest b(3, Concat(prompt_, {1, 2, 3, 4}));
  const PrefixHit hit = m_.GetComputedBlocks(b.view());
  // Position 24 reads [17, 24]: blocks 4 and 5 are all group 1 needs.
  EXPECT_EQ(hit.num_tokens, 24);
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(hit.sliding_blocks, ElementsAre(kR, kR, kR, kR, 4, 5));
  ASSERT_TRUE(m_.AllocateSlots(b.view(), 4, 0, hit).has_value());
  b.num_computed_tokens = 28;
  EXPECT_THAT(Table(m_, 3, 1), ElementsAre(kR, kR, kR, kR, 4, 5, 6));
  EXPECT_INVARIANTS(m_);
  m_.Free(b.view());
  EXPECT_EQ(m_.pool(0).num_in_use_blocks() + m_.pool(1).num_in_use_blocks(), 0);
  EXPECT_INVARIANTS(m_);
}

TEST_F(SlidingPrefixTest, HitShrinksToWhereGroupOneHoldsTheWindow) {
  RunFirst(/*decode=*/false);
  // Group 1's queue: 6-11, then cached 5, 4, 3, 2, 1, 0: seven blocks evict block 5.
  Evict(7);
  TestRequest b(3, Concat(prompt_, {1, 2, 3, 4}));
  const PrefixHit hit = m_.GetComputedBlocks(b.view());
  // 24 tokens would need blocks 4-5; 20 tokens need 3-4 (position 20 reads [13, 20]).
  EXPECT_EQ(hit.num_tokens, 20);
  EXPECT_THAT(hit.blocks, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(hit.sliding_blocks, ElementsAre(kR, kR, kR, 3, 4));
  ASSERT_TRUE(m_.AllocateSlots(b.view(), 8, 0, hit).has_value());
  EXPECT_EQ(m_.BlockTable(3, 0).size(), 7u);
  EXPECT_INVARIANTS(m_);
  m_.Free(b.view());
  EXPECT_INVARIANTS(m_);
}

TEST_F(SlidingPrefixTest, NoHitWhenGroupOneLostTheWindow) {
  RunFirst(/*decode=*/false);
  Evict(12);  // every group-1 block
  TestRequest b(3, Concat(prompt_, {1, 2, 3, 4}));
  const PrefixHit hit = m_.GetComputedBlocks(b.view());
  EXPECT_EQ(hit.num_tokens, 0);
  EXPECT_TRUE(hit.blocks.empty());
  EXPECT_TRUE(hit.sliding_blocks.empty());
  // Group 0 still has the prompt: the hit is lost only because group 1 lacks it.
  EXPECT_EQ(m_.pool(0).num_cached_evictable_blocks(), 6);
}

// A prompt computed in chunks: each chunk releases what lies before its first token's window.
TEST(SlidingWindowTest, ChunkedPrefillAcrossTheWindowEdge) {
  KvCacheManager m(SlidingConfig(16, 6));
  TestRequest r(1, Blocks(10, kBlockSize, 0));
  ASSERT_TRUE(Step(m, r, 12));
  EXPECT_THAT(Table(m, 1, 1), ElementsAre(0, 1, 2));
  ASSERT_TRUE(Step(m, r, 12));  // position 12 reads [5, 12]: block 0 goes
  EXPECT_EQ(Table(m, 1, 1)[0], kR);
  EXPECT_EQ(m.BlockTable(1, 1).size(), 6u);
  ASSERT_TRUE(Step(m, r, 12));  // position 24 reads [17, 24]: blocks 1-3 go
  EXPECT_THAT(std::vector<BlockId>(m.BlockTable(1, 1).begin(), m.BlockTable(1, 1).begin() + 4),
              ElementsAre(kR, kR, kR, kR));
  EXPECT_EQ(m.pool(1).num_in_use_blocks(), 5);  // blocks 4-8 of positions 16-35
  EXPECT_EQ(m.pool(0).num_in_use_blocks(), 9);
  EXPECT_INVARIANTS(m);
  // A 17-token chunk from position 36 needs blocks 7-13: seven, in a pool of six.
  EXPECT_FALSE(m.AllocateSlots(r.view(), 17).has_value());
  EXPECT_EQ(m.pool(1).num_in_use_blocks(), 5);  // nullopt released nothing
  EXPECT_INVARIANTS(m);
  m.Free(r.view());
  EXPECT_EQ(m.pool(1).num_in_use_blocks(), 0);
}

// max_tokens_per_step() tokens fit a lone request at every alignment of its first token.
TEST(SlidingWindowTest, MaxTokensPerStepFitsAtEveryAlignment) {
  for (int watermark : {0, 2}) {
    const KvCacheConfig config = SlidingConfig(64, 7, watermark);
    const int most = KvCacheManager(config).max_tokens_per_step();
    EXPECT_EQ(most, (7 - watermark - 1) * kBlockSize - kWindow + 1);
    for (int start = 0; start < 3 * kBlockSize; ++start) {
      KvCacheManager m(config);
      TestRequest r(1, std::vector<TokenId>(200, 3));
      if (start > 0) {
        ASSERT_TRUE(Step(m, r, start));
      }
      // Admission keeps the watermark; later steps may use it, so test a later step.
      ASSERT_TRUE(Step(m, r, most)) << "start " << start << ", watermark " << watermark;
      EXPECT_INVARIANTS(m);
    }
  }
}

// Draft lookahead slots past a block edge, then rejected: both groups drop the tail block.
TEST(SlidingWindowTest, RejectedDraftsNearTheEdgeFreeTheTailInBothGroups) {
  KvCacheManager m(SlidingConfig(16, 8));
  TestRequest r(1, Blocks(4, kBlockSize, 0));
  ASSERT_TRUE(Step(m, r, 14));
  // The last verified token (position 14) plus 3 drafts at 15-17: a fifth block.
  ASSERT_TRUE(m.AllocateSlots(r.view(), 2, 3).has_value());
  EXPECT_EQ(m.BlockTable(1, 0).size(), 5u);
  EXPECT_EQ(m.BlockTable(1, 1).size(), 5u);
  EXPECT_EQ(Table(m, 1, 1)[0], kR);  // position 14 reads [7, 14]
  r.num_computed_tokens = 16;         // every draft rejected
  m.FreeTailBlocks(1, 4);
  EXPECT_EQ(m.BlockTable(1, 1).size(), 4u);
  EXPECT_EQ(m.pool(1).num_in_use_blocks(), 3);
  EXPECT_INVARIANTS(m);
  m.Free(r.view());
  EXPECT_INVARIANTS(m);
}

// Without prefix caching released blocks are plainly free; a kv_window truncation that would
// keep a hole in group 1 drops every block.
TEST(SlidingWindowTest, UncachedReleaseAndTruncation) {
  KvCacheConfig config = SlidingConfig(16, 6);
  config.enable_prefix_caching = false;
  KvCacheManager m(config);
  TestRequest r(1, Blocks(5, kBlockSize, 0));
  ASSERT_TRUE(Step(m, r, 20));
  ASSERT_TRUE(Step(m, r, 1));  // position 20 reads [13, 20]: blocks 0-2 go, uncached
  EXPECT_EQ(m.pool(1).num_cached_evictable_blocks(), 0);
  EXPECT_EQ(m.pool(1).num_free_blocks(), 3);
  EXPECT_EQ(m.TruncateBlocks(1, 1), 0);
  EXPECT_TRUE(m.BlockTable(1, 0).empty());
  EXPECT_EQ(m.pool(0).num_in_use_blocks() + m.pool(1).num_in_use_blocks(), 0);
  EXPECT_INVARIANTS(m);
}

}  // namespace sliding_window_test
}  // namespace tokenmill
