// Pools under one KV memory limit (cache/kv_memory_budget.h): a share takes what the limit has
// free and asks the others for what it needs beyond; an elastic pool grows before it evicts
// its own cache, asks only when its cache cannot serve, and gives back blocks from its top,
// cached ones too (with the prefixes after them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "cache/kv_memory_budget.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace elastic_pool_test {

using testing::Blocks;
using testing::TestRequest;

constexpr int kBlockSize = 4;
constexpr int64_t kBlockBytes = 100;

#define EXPECT_INVARIANTS(manager) EXPECT_EQ((manager).CheckInvariants().ToString(), "OK")

TEST(KvMemoryBudgetTest, GrantsWhatIsUnclaimedAndAsksTheOthersForTheRest) {
  const auto budget = KvMemoryBudget::Create(10 * kBlockBytes);
  int a_woken = 0;
  int b_woken = 0;
  auto a = budget->Join([&] { ++a_woken; });
  auto b = budget->Join([&] { ++b_woken; });

  EXPECT_EQ(a->TakeBlocks(0, 8, 8, kBlockBytes), 8);
  EXPECT_EQ(a->held_bytes(), 8 * kBlockBytes);
  EXPECT_EQ(budget->unclaimed_bytes(), 2 * kBlockBytes);
  EXPECT_EQ(a->BytesAsked(), 0);
  EXPECT_EQ(b_woken, 0);

  // b needs 5 and gets 2: a is asked for 3 and woken.
  EXPECT_EQ(b->TakeBlocks(0, 6, 5, kBlockBytes), 2);
  EXPECT_EQ(budget->unclaimed_bytes(), 0);
  EXPECT_EQ(a->BytesAsked(), 3 * kBlockBytes);
  EXPECT_EQ(b->BytesAsked(), 0);
  EXPECT_EQ(a_woken, 1);

  // a gives 3 back: b, which waits, is woken and takes them; a cannot take them back first.
  a->GiveBlocks(3, kBlockBytes);
  EXPECT_EQ(b_woken, 1);
  EXPECT_EQ(a->BytesAsked(), 0);
  EXPECT_EQ(a->TakeBlocks(0, 3, 0, kBlockBytes), 0);
  EXPECT_EQ(b->TakeBlocks(0, 3, 3, kBlockBytes), 3);
  EXPECT_EQ(a->BytesAsked(), 0);
  EXPECT_EQ(budget->unclaimed_bytes(), 0);

  // A share that leaves gives back all it holds.
  b.reset();
  EXPECT_EQ(budget->unclaimed_bytes(), 5 * kBlockBytes);
}

TEST(KvMemoryBudgetTest, ClearedWantAsksNothing) {
  const auto budget = KvMemoryBudget::Create(4 * kBlockBytes);
  auto a = budget->Join(nullptr);
  auto b = budget->Join(nullptr);
  EXPECT_EQ(a->TakeBlocks(0, 4, 4, kBlockBytes), 4);
  EXPECT_EQ(b->TakeBlocks(0, 2, 1, kBlockBytes), 0);
  EXPECT_EQ(a->BytesAsked(), kBlockBytes);
  b->ClearWant();
  EXPECT_EQ(a->BytesAsked(), 0);
  // Asking for less than it takes asks nothing.
  EXPECT_EQ(b->TakeBlocks(0, 2, 0, kBlockBytes), 0);
  EXPECT_EQ(a->BytesAsked(), 0);
}

TEST(KvMemoryBudgetTest, EachPoolsAskStandsUntilItsOwnTakeOrTheNextStep) {
  const auto budget = KvMemoryBudget::Create(4 * kBlockBytes);
  auto a = budget->Join(nullptr);
  auto b = budget->Join(nullptr);
  EXPECT_EQ(a->TakeBlocks(0, 4, 4, kBlockBytes), 4);
  EXPECT_EQ(b->TakeBlocks(0, 2, 2, kBlockBytes), 0);  // b's pool 0 asks for 2 blocks
  EXPECT_EQ(b->TakeBlocks(1, 1, 0, kBlockBytes), 0);  // its pool 1 asks nothing
  EXPECT_EQ(a->BytesAsked(), 2 * kBlockBytes);        // pool 0's ask stands
  EXPECT_EQ(b->TakeBlocks(1, 1, 1, 3 * kBlockBytes), 0);  // pool 1 asks for a larger block
  EXPECT_EQ(a->BytesAsked(), 5 * kBlockBytes);
  b->ClearWant();
  EXPECT_EQ(a->BytesAsked(), 0);
}

// The manager's pool grows through `share`.
void MakeElastic(KvCacheManager& m, KvMemoryShare& share) {
  m.MakeElastic(0, [&share](int blocks, int needed) {
    return share.TakeBlocks(0, blocks, needed, kBlockBytes);
  });
}

TEST(ElasticPoolTest, GrowsOnDemandFromTheLimit) {
  const auto budget = KvMemoryBudget::Create(40 * kBlockBytes);
  auto share = budget->Join(nullptr);
  KvCacheManager m(testing::CacheConfig(40, kBlockSize));
  MakeElastic(m, *share);
  EXPECT_EQ(m.pool().active_blocks(), 0);
  EXPECT_INVARIANTS(m);

  TestRequest r(1, Blocks(3, kBlockSize, 10));
  ASSERT_TRUE(m.AllocateSlots(r.view(), 12).has_value());
  // At least 16 at a time, lowest ids first.
  EXPECT_EQ(m.pool().active_blocks(), 16);
  EXPECT_EQ(share->held_bytes(), 16 * kBlockBytes);
  EXPECT_THAT(m.BlockTable(1), ::testing::ElementsAre(0, 1, 2));
  EXPECT_INVARIANTS(m);
}

TEST(ElasticPoolTest, GrowsBeforeEvictingItsOwnCacheAndEvictsWhenTheLimitIsTaken) {
  const auto budget = KvMemoryBudget::Create(20 * kBlockBytes);
  auto share = budget->Join(nullptr);
  auto other = budget->Join(nullptr);
  KvCacheManager m(testing::CacheConfig(20, kBlockSize));
  MakeElastic(m, *share);
  // 16 blocks of cached prefixes.
  for (int i = 0; i < 4; ++i) {
    TestRequest r(static_cast<uint64_t>(i + 1), Blocks(4, kBlockSize, 10 * (i + 1)));
    ASSERT_TRUE(m.AllocateSlots(r.view(), 16).has_value());
    r.num_computed_tokens = 16;
    m.Free(r.view());
  }
  EXPECT_EQ(m.pool().active_blocks(), 16);
  EXPECT_EQ(m.Stats().num_cached_evictable_blocks, 16);
  // The next request of 8 blocks grows the pool by 4 (as many as the limit lets it) before it
  // evicts 4 cached blocks.
  TestRequest next(9, Blocks(8, kBlockSize, 90));
  ASSERT_TRUE(m.AllocateSlots(next.view(), 32).has_value());
  EXPECT_EQ(m.pool().active_blocks(), 20);
  EXPECT_EQ(m.Stats().evictions, 4);
  EXPECT_EQ(other->BytesAsked(), 0);  // its own cache served it: nothing asked of others
  EXPECT_INVARIANTS(m);
}

TEST(ElasticPoolTest, ShrinksFromTheTopStoppingAtABlockInUse) {
  const auto budget = KvMemoryBudget::Create(16 * kBlockBytes);
  auto share = budget->Join(nullptr);
  KvCacheManager m(testing::CacheConfig(16, kBlockSize));
  MakeElastic(m, *share);
  TestRequest held(1, Blocks(2, kBlockSize, 10));
  ASSERT_TRUE(m.AllocateSlots(held.view(), 8).has_value());  // blocks 0, 1
  TestRequest cached(2, Blocks(3, kBlockSize, 20));
  ASSERT_TRUE(m.AllocateSlots(cached.view(), 12).has_value());  // blocks 2, 3, 4
  cached.num_computed_tokens = 12;
  m.Free(cached.view());
  ASSERT_EQ(m.pool().active_blocks(), 16);

  // Free blocks first; cached ones only when allowed.
  EXPECT_EQ(m.ShrinkTop(0, 100, 0), 11);  // 15..5
  EXPECT_EQ(m.pool().active_blocks(), 5);
  EXPECT_INVARIANTS(m);
  // Block 4 ends the chain: evicting it orphans nothing, and 2 and 3 stay cached.
  EXPECT_EQ(m.ShrinkTop(0, 100, 1), 1);
  EXPECT_EQ(m.pool().active_blocks(), 4);
  EXPECT_INVARIANTS(m);
  EXPECT_EQ(m.ShrinkTop(0, 100, 100), 2);  // 3 and 2; then block 1 is in use
  EXPECT_EQ(m.pool().active_blocks(), 2);
  EXPECT_EQ(m.Stats().num_cached_evictable_blocks, 0);
  EXPECT_INVARIANTS(m);
}

TEST(ElasticPoolTest, EvictingAPrefixAtTheTopEvictsTheBlocksCachedAfterIt) {
  // Room for 3 blocks: the pool takes blocks 0..2.
  const auto budget = KvMemoryBudget::Create(3 * kBlockBytes);
  auto share = budget->Join(nullptr);
  KvCacheManager m(testing::CacheConfig(16, kBlockSize));
  MakeElastic(m, *share);
  TestRequest filler(1, Blocks(2, kBlockSize, 50));
  ASSERT_TRUE(m.AllocateSlots(filler.view(), 8).has_value());  // blocks 0, 1
  TestRequest head(2, Blocks(1, kBlockSize, 10));
  ASSERT_TRUE(m.AllocateSlots(head.view(), 4).has_value());  // block 2, at the top
  ASSERT_EQ(m.pool().active_blocks(), 3);
  head.num_computed_tokens = 4;
  m.CacheComputedBlocks(head.view());
  m.Free(filler.view());  // nothing computed: 0 and 1 free
  // A request continues head's prefix in blocks 0 and 1, which are cached after block 2.
  TestRequest longer(3, Blocks(3, kBlockSize, 10));
  const PrefixHit hit = m.GetComputedBlocks(longer.view());
  ASSERT_EQ(hit.num_tokens, 4);
  ASSERT_TRUE(m.AllocateSlots(longer.view(), 8, 0, hit).has_value());
  EXPECT_THAT(m.BlockTable(3), ::testing::ElementsAre(2, 0, 1));
  longer.num_computed_tokens = 12;
  m.Free(longer.view());
  m.Free(head.view());
  ASSERT_EQ(m.Stats().num_cached_evictable_blocks, 3);

  // Giving back the top block evicts the chain's head, and the two blocks after it, which no
  // lookup could reach any more.
  ASSERT_EQ(m.ShrinkTop(0, 1, 1), 1);
  EXPECT_EQ(m.pool().active_blocks(), 2);
  EXPECT_EQ(m.Stats().num_cached_evictable_blocks, 0);
  EXPECT_EQ(m.FindComputedBlocks(longer.view()).num_tokens, 0);
  EXPECT_INVARIANTS(m);
}

// Two managers of different block sizes in bytes under one limit, driven at random: requests
// sharing prefixes come, grow and go, and each gives back what the other asks between
// operations. After each: the invariants hold, each pool holds exactly its share's bytes, and
// the shares together stay within the limit.
TEST(ElasticPoolTest, RandomTrafficOfTwoPoolsKeepsInvariantsAndTheLimit) {
  constexpr int64_t kLimit = 64 * kBlockBytes;
  const int64_t block_bytes[2] = {kBlockBytes, 3 * kBlockBytes};
  const auto budget = KvMemoryBudget::Create(kLimit);
  std::vector<std::unique_ptr<KvMemoryShare>> shares;
  std::vector<std::unique_ptr<KvCacheManager>> managers;
  for (int i = 0; i < 2; ++i) {
    shares.push_back(budget->Join(nullptr));
    managers.push_back(std::make_unique<KvCacheManager>(
        testing::CacheConfig(static_cast<int>(kLimit / block_bytes[i]), kBlockSize, 1)));
    managers[i]->MakeElastic(0, [share = shares[i].get(), bytes = block_bytes[i]](
                                    int blocks, int needed) {
      return share->TakeBlocks(0, blocks, needed, bytes);
    });
  }
  std::mt19937 rng(7);
  std::vector<std::vector<TestRequest>> live(2);
  uint64_t next_id = 1;
  int admitted = 0, refused = 0, given_back = 0;
  for (int op = 0; op < 4000; ++op) {
    const int i = static_cast<int>(rng() % 2);
    KvCacheManager& m = *managers[i];
    const int action = static_cast<int>(rng() % 4);
    if (action == 0 || live[i].empty()) {  // admit: one of 4 prefixes, then its own tokens
      std::vector<TokenId> tokens = Blocks(1 + static_cast<int>(rng() % 3), kBlockSize,
                                           100 * static_cast<TokenId>(rng() % 4));
      for (int t = static_cast<int>(rng() % 20); t > 0; --t) {
        tokens.push_back(static_cast<TokenId>(rng() % 1000));
      }
      TestRequest r(next_id++, tokens);
      const PrefixHit hit = m.GetComputedBlocks(r.view());
      const int fresh = static_cast<int>(tokens.size()) - hit.num_tokens;
      if (m.AllocateSlots(r.view(), fresh, 0, hit).has_value()) {
        r.num_computed_tokens = static_cast<int>(tokens.size());
        live[i].push_back(r);
        ++admitted;
      } else {
        ++refused;
      }
    } else if (action == 1) {  // decode a few tokens, or preempt itself when the pool is short
      TestRequest& r = live[i][rng() % live[i].size()];
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int t = 0; t < n; ++t) r.tokens.push_back(static_cast<TokenId>(rng() % 1000));
      if (m.AllocateSlots(r.view(), n).has_value()) {
        r.num_computed_tokens += n;
      } else {
        r.tokens.resize(r.tokens.size() - static_cast<size_t>(n));
        m.Free(r.view());
        live[i].erase(live[i].begin() + static_cast<std::ptrdiff_t>(&r - live[i].data()));
      }
    } else if (action == 2) {  // finish
      const size_t k = rng() % live[i].size();
      m.Free(live[i][k].view());
      live[i].erase(live[i].begin() + static_cast<std::ptrdiff_t>(k));
    } else {  // the other engine's turn between steps: give back what is asked
      const int other = 1 - i;
      KvCacheManager& o = *managers[other];
      const int64_t asked = shares[other]->BytesAsked();
      if (asked > 0) {
        const int wanted = static_cast<int>((asked + block_bytes[other] - 1) / block_bytes[other]);
        const int given = o.ShrinkTop(0, wanted, wanted);
        shares[other]->GiveBlocks(given, block_bytes[other]);
        given_back += given;
      }
      shares[i]->ClearWant();
    }
    for (int j = 0; j < 2; ++j) {
      ASSERT_EQ(managers[j]->CheckInvariants().ToString(), "OK") << "op " << op;
      ASSERT_EQ(shares[j]->held_bytes(), managers[j]->pool().active_blocks() * block_bytes[j]);
    }
    ASSERT_LE(shares[0]->held_bytes() + shares[1]->held_bytes(), kLimit);
  }
  EXPECT_GT(admitted, 500);
  EXPECT_GT(refused, 10);
  EXPECT_GT(given_back, 10);
}

}  // namespace elastic_pool_test
}  // namespace tokenmill
