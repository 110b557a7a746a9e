// The host-memory tier's store: slots of one arena, LRU by digest, lookups that count, a purge
// by salt prefix, and the events a KV subscriber gets.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cache/tiers/kv_host_tier.h"

namespace tokenmill {
namespace kv_host_tier_test {

constexpr int64_t kPayload = 64;

BlockDigest DigestOf(int n) {
  BlockDigest digest{};
  digest[0] = static_cast<uint8_t>(n);
  digest[31] = 0xAB;
  return digest;
}

class KvHostTierTest : public ::testing::Test {
 protected:
  // Three slots, and a few spare bytes that make no slot.
  KvHostTierTest() : arena_(3 * kPayload + 10), tier_(arena_, kPayload) {}
  // Stores block n with salt `salt`, its slot filled with n.
  bool Put(int n, const std::string& salt = "") {
    const std::vector<TokenId> tokens{n, n + 1};
    const std::span<uint8_t> slot =
        tier_.Store(DigestOf(n), static_cast<BlockHash>(100 + n), std::nullopt, salt, tokens);
    if (slot.empty()) return false;
    EXPECT_EQ(slot.size(), static_cast<size_t>(kPayload));
    std::memset(slot.data(), n, slot.size());
    return true;
  }
  bool Holds(int n) { return tier_.Load(DigestOf(n))[0] == n; }

  std::vector<uint8_t> arena_;
  KvHostTier tier_;
};

TEST_F(KvHostTierTest, StoresUpToItsSlotsThenDropsTheLeastRecentlyUsed) {
  EXPECT_EQ(tier_.Stats().capacity_blocks, 3);
  EXPECT_TRUE(Put(1));
  EXPECT_TRUE(Put(2));
  EXPECT_TRUE(Put(3));
  EXPECT_FALSE(Put(2)) << "already here: nothing to copy (it is used again)";
  EXPECT_TRUE(Holds(1));  // least recently used first: 3, 2, 1
  EXPECT_TRUE(Put(4));    // takes 3's slot
  EXPECT_TRUE(tier_.Load(DigestOf(3)).empty());
  EXPECT_TRUE(Holds(1));
  EXPECT_TRUE(Holds(2));
  EXPECT_TRUE(Holds(4));
  const KvHostTierStats stats = tier_.Stats();
  EXPECT_EQ(stats.blocks, 3);
  EXPECT_EQ(stats.bytes, 3 * kPayload);
  EXPECT_EQ(stats.stores, 4);
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_EQ(stats.loads, 4);
  EXPECT_EQ(stats.load_bytes, 4 * kPayload);
}

TEST_F(KvHostTierTest, CountPresentCountsARunFromTheFirstAndEveryLookup) {
  Put(1);
  Put(2);
  Put(4);
  const std::vector<BlockDigest> chain{DigestOf(0), DigestOf(1), DigestOf(2), DigestOf(3),
                                       DigestOf(4)};
  EXPECT_EQ(tier_.CountPresent(chain, 1), 2);  // 1, 2, then 3 is missing
  EXPECT_EQ(tier_.CountPresent(chain, 0), 0);
  EXPECT_EQ(tier_.CountPresent(chain, 4), 1);
  const KvHostTierStats stats = tier_.Stats();
  EXPECT_EQ(stats.lookups, 3 + 1 + 1);
  EXPECT_EQ(stats.hits, 3);
}

TEST_F(KvHostTierTest, PurgeDropsATenantsBlocksAndEventsSayWhatChanged) {
  Put(1, "tenant:a\x1f");
  Put(2, "tenant:b\x1f");
  Put(3, "tenant:a\x1fsalt");
  std::vector<KvTierEvent> events = tier_.TakeEvents();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_TRUE(events[0].stored);
  EXPECT_EQ(events[0].hash, 101u);
  EXPECT_EQ(events[0].tokens, (std::vector<TokenId>{1, 2}));

  EXPECT_EQ(tier_.Purge("tenant:a\x1f"), 2);
  EXPECT_TRUE(tier_.Load(DigestOf(1)).empty());
  EXPECT_TRUE(tier_.Load(DigestOf(3)).empty());
  EXPECT_TRUE(Holds(2));
  events = tier_.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].stored);
  EXPECT_FALSE(events[1].stored);
  EXPECT_EQ(tier_.Stats().purged, 2);
  // Freed slots take new blocks without evicting.
  EXPECT_TRUE(Put(5));
  EXPECT_TRUE(Put(6));
  EXPECT_EQ(tier_.Stats().evictions, 0);
  tier_.Erase(DigestOf(6));
  EXPECT_TRUE(tier_.Load(DigestOf(6)).empty());
  EXPECT_EQ(tier_.Purge(""), 2);
  EXPECT_EQ(tier_.Stats().blocks, 0);
}

TEST(KvHostTierEmptyTest, AnArenaWithoutASlotStoresNothing) {
  std::vector<uint8_t> arena(kPayload - 1);
  KvHostTier tier(arena, kPayload);
  EXPECT_TRUE(tier.Store(DigestOf(1), 1, std::nullopt, "", {}).empty());
  EXPECT_EQ(tier.Stats().capacity_blocks, 0);
  EXPECT_TRUE(tier.TakeEvents().empty());
}

}  // namespace kv_host_tier_test
}  // namespace tokenmill
