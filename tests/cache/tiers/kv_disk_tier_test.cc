// The disk tier on real files: round trips, restarts, identities, the budget, the TTL, purges,
// the write queue and cancelled loads.
#include "cache/tiers/kv_disk_tier.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>

#include "tests/cache/tiers/tier_test_util.h"

namespace tokenmill::testing {
namespace kv_disk_tier_test {

std::unique_ptr<KvDiskTier> OpenTier(const KvDiskTierConfig& config,
                                     std::atomic<int>* wakes = nullptr) {
  return KvDiskTier::Open(config, [wakes] {
    if (wakes != nullptr) ++*wakes;
  });
}

void ExpectPayloads(const KvTierLoad& load, const Chain& chain, int count) {
  ASSERT_EQ(static_cast<int>(load.payloads.size()), count);
  for (int i = 0; i < count; ++i) EXPECT_EQ(load.payloads[i], chain.Payload(i)) << "block " << i;
}

TEST(KvDiskTierTest, WriteThenLoadIsBitIdentical) {
  TempDir dir;
  const KvDiskTierConfig config = Config(dir.path());
  std::atomic<int> wakes{0};
  auto tier = OpenTier(config, &wakes);
  const Chain chain = MakeChain(tier->root(), "tenant", 5, 1);
  WriteChain(*tier, chain);
  FlushAll(*tier);
  EXPECT_EQ(tier->CountPresent(chain.digests, 0), 5);
  EXPECT_EQ(tier->CountPresent(chain.digests, 2), 3);
  EXPECT_TRUE(tier->Contains(chain.digests[4]));
  const KvTierLoad load = LoadNow(*tier, chain.salt, chain.Refs());
  ExpectPayloads(load, chain, 5);
  EXPECT_GE(wakes.load(), 1);
  const KvDiskTierStats stats = tier->Stats();
  EXPECT_TRUE(stats.enabled);
  EXPECT_EQ(stats.writes, 5);
  EXPECT_EQ(stats.blocks, 5);
  EXPECT_EQ(stats.loads, 5);
  EXPECT_EQ(stats.load_bytes, 5 * kPayloadBytes);
  EXPECT_EQ(stats.load_count, 1);
  EXPECT_EQ(stats.lookups, 5 + 3);
  EXPECT_EQ(stats.hits, 5 + 3);
  EXPECT_EQ(stats.rejects, 0);
  // Stored events in order, in the pool's hashes.
  const std::vector<KvTierEvent> events = tier->TakeEvents();
  ASSERT_EQ(events.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(events[i].stored);
    EXPECT_EQ(events[i].hash, chain.Hash(i));
    EXPECT_EQ(events[i].parent_hash, i == 0 ? std::nullopt : std::optional(chain.Hash(i - 1)));
    EXPECT_EQ(events[i].tokens,
              std::vector<TokenId>(chain.BlockTokens(i).begin(), chain.BlockTokens(i).end()));
  }
  // Files 0600 in directories 0700: KV on disk is prompt data.
  struct stat st {};
  ASSERT_EQ(::stat(BlockPath(config, chain.digests[0]).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(config.dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Writing a block again is skipped; a block never written is a miss.
  WriteChain(*tier, chain);
  FlushAll(*tier);
  EXPECT_EQ(tier->Stats().writes, 5);
  const Chain other = MakeChain(tier->root(), "tenant", 2, 2);
  EXPECT_EQ(tier->CountPresent(other.digests, 0), 0);
  EXPECT_TRUE(LoadNow(*tier, other.salt, other.Refs()).payloads.empty());
  EXPECT_EQ(tier->Stats().rejects, 0);
}

TEST(KvDiskTierTest, RestartFindsTheBlocks) {
  TempDir dir;
  const KvDiskTierConfig config = Config(dir.path());
  Chain chain;
  {
    auto tier = OpenTier(config);
    chain = MakeChain(tier->root(), "t", 4, 3);
    WriteChain(*tier, chain);
    FlushAll(*tier);
  }
  auto tier = OpenTier(config);
  FlushAll(*tier);  // waits for the scan
  EXPECT_EQ(tier->CountPresent(chain.digests, 0), 4);
  const KvDiskTierStats stats = tier->Stats();
  EXPECT_EQ(stats.blocks, 4);
  EXPECT_EQ(stats.other_bytes, 0);
  std::vector<KvTierEvent> events = tier->TakeEvents();
  ASSERT_EQ(events.size(), 4u);
  std::sort(events.begin(), events.end(),
            [](const KvTierEvent& a, const KvTierEvent& b) { return a.hash < b.hash; });
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(events[i].stored);
    EXPECT_EQ(events[i].hash, chain.Hash(i));
    EXPECT_EQ(events[i].parent_hash, i == 0 ? std::nullopt : std::optional(chain.Hash(i - 1)));
    EXPECT_EQ(events[i].tokens.size(), static_cast<size_t>(kBlockSize));
  }
  ExpectPayloads(LoadNow(*tier, chain.salt, chain.Refs()), chain, 4);
  EXPECT_EQ(std::filesystem::exists(config.dir + "/" + DigestHex(tier->root()).substr(0, 32) +
                                    "/identity"),
            true);
}

TEST(KvDiskTierTest, AnotherIdentityIgnoresTheBlocks) {
  TempDir dir;
  const KvDiskTierConfig config_a = Config(dir.path(), "model-a");
  const KvDiskTierConfig config_b = Config(dir.path(), "model-b");
  auto a = OpenTier(config_a);
  const Chain chain_a = MakeChain(a->root(), "t", 3, 4);
  WriteChain(*a, chain_a);
  FlushAll(*a);
  const int64_t bytes_a = a->Stats().bytes;
  auto b = OpenTier(config_b);
  FlushAll(*b);
  EXPECT_NE(a->root(), b->root());
  EXPECT_EQ(b->CountPresent(chain_a.digests, 0), 0);
  const Chain chain_b = MakeChain(b->root(), "t", 3, 4);  // the same tokens and salt
  for (int i = 0; i < 3; ++i) EXPECT_NE(chain_a.digests[i], chain_b.digests[i]);
  EXPECT_EQ(b->CountPresent(chain_b.digests, 0), 0);
  EXPECT_TRUE(LoadNow(*b, chain_b.salt, chain_b.Refs()).payloads.empty());
  EXPECT_TRUE(b->TakeEvents().empty());
  const KvDiskTierStats stats = b->Stats();
  EXPECT_EQ(stats.blocks, 0);
  EXPECT_EQ(stats.other_bytes, bytes_a);  // counted in the budget, never served
  EXPECT_EQ(stats.rejects, 0);
  ExpectPayloads(LoadNow(*a, chain_a.salt, chain_a.Refs()), chain_a, 3);
}

TEST(KvDiskTierTest, BudgetEvictsTheLeastRecentlyUsedOfAnyIdentity) {
  TempDir dir;
  KvDiskTierConfig config = Config(dir.path());
  int64_t file_bytes = 0;
  Chain foreign;
  {
    auto other = OpenTier(Config(dir.path(), "model-b"));
    foreign = MakeChain(other->root(), "x", 1, 9);
    WriteChain(*other, foreign);
    FlushAll(*other);
    file_bytes = other->Stats().bytes;
  }
  ASSERT_GT(file_bytes, kPayloadBytes);
  config.max_bytes = 3 * file_bytes;  // three files of this shape (salts of one byte)
  auto tier = OpenTier(config);
  std::vector<Chain> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(MakeChain(tier->root(), "s", 1, 10 + i));
  // The foreign file is the oldest: the third write of ours makes room by deleting it.
  WriteChain(*tier, blocks[0]);
  WriteChain(*tier, blocks[1]);
  FlushAll(*tier);
  EXPECT_EQ(tier->Stats().other_bytes, file_bytes);
  WriteChain(*tier, blocks[2]);
  FlushAll(*tier);
  EXPECT_EQ(tier->Stats().other_bytes, 0);
  EXPECT_FALSE(
      std::filesystem::exists(BlockPath(Config(dir.path(), "model-b"), foreign.digests[0])));
  // A load refreshes block 0: block 1 is now the least recently used.
  ExpectPayloads(LoadNow(*tier, "s", blocks[0].Refs()), blocks[0], 1);
  const Chain fourth = MakeChain(tier->root(), "s", 1, 13);
  tier->TakeEvents();
  WriteChain(*tier, fourth);
  FlushAll(*tier);
  EXPECT_TRUE(tier->Contains(blocks[0].digests[0]));
  EXPECT_FALSE(tier->Contains(blocks[1].digests[0]));
  EXPECT_FALSE(std::filesystem::exists(BlockPath(config, blocks[1].digests[0])));
  EXPECT_TRUE(tier->Contains(blocks[2].digests[0]));
  EXPECT_TRUE(tier->Contains(fourth.digests[0]));
  const KvDiskTierStats stats = tier->Stats();
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_EQ(stats.bytes, 3 * file_bytes);
  const std::vector<KvTierEvent> events = tier->TakeEvents();
  ASSERT_EQ(events.size(), 2u);  // removed block 1, stored the fourth
  EXPECT_FALSE(events[0].stored);
  EXPECT_EQ(events[0].hash, blocks[1].Hash(0));
  EXPECT_TRUE(events[1].stored);
  // A block larger than the whole budget is dropped.
  config.max_bytes = file_bytes - 1;
  TempDir small_dir;
  config.dir = small_dir.path() + "/kv";
  auto small = OpenTier(config);
  WriteChain(*small, MakeChain(small->root(), "s", 1, 14));
  FlushAll(*small);
  EXPECT_EQ(small->Stats().writes, 0);
  EXPECT_EQ(small->Stats().dropped_writes, 1);
}

TEST(KvDiskTierTest, FilesUnusedForTheTtlExpire) {
  TempDir dir;
  KvDiskTierConfig config = Config(dir.path());
  config.ttl = std::chrono::seconds(1);
  auto tier = OpenTier(config);
  const Chain chain = MakeChain(tier->root(), "s", 3, 20);
  WriteChain(*tier, chain);
  FlushAll(*tier);
  ASSERT_EQ(tier->CountPresent(chain.digests, 0), 3);
  tier->TakeEvents();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (tier->Stats().expirations < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(tier->Stats().expirations, 3);
  EXPECT_EQ(tier->CountPresent(chain.digests, 0), 0);
  for (const BlockDigest& d : chain.digests) {
    EXPECT_FALSE(std::filesystem::exists(BlockPath(config, d)));
  }
  const std::vector<KvTierEvent> events = tier->TakeEvents();
  ASSERT_EQ(events.size(), 3u);
  for (const KvTierEvent& e : events) EXPECT_FALSE(e.stored);
}

TEST(KvDiskTierTest, FilesOlderThanTheTtlExpireAtStart) {
  TempDir dir;
  KvDiskTierConfig config = Config(dir.path());
  Chain chain;
  {
    auto tier = OpenTier(config);
    chain = MakeChain(tier->root(), "s", 2, 21);
    WriteChain(*tier, chain);
    FlushAll(*tier);
  }
  // Block 0 last used two hours ago (the scan takes a file's mtime as its last use).
  const auto old = std::filesystem::file_time_type::clock::now() - std::chrono::hours(2);
  std::filesystem::last_write_time(BlockPath(config, chain.digests[0]), old);
  config.ttl = std::chrono::seconds(3600);
  auto tier = OpenTier(config);
  FlushAll(*tier);
  EXPECT_EQ(tier->Stats().expirations, 1);
  EXPECT_FALSE(tier->Contains(chain.digests[0]));
  EXPECT_TRUE(tier->Contains(chain.digests[1]));
}

TEST(KvDiskTierTest, PurgeDeletesASaltPrefixOfEveryIdentity) {
  TempDir dir;
  auto a = OpenTier(Config(dir.path(), "model-a"));
  auto b = OpenTier(Config(dir.path(), "model-b"));
  const Chain a1 = MakeChain(a->root(), "tenant-a/1", 2, 30);
  const Chain a2 = MakeChain(a->root(), "tenant-a/2", 3, 31);
  const Chain other = MakeChain(a->root(), "tenant-b", 2, 32);
  const Chain foreign = MakeChain(b->root(), "tenant-a", 1, 33);
  for (const Chain* c : {&a1, &a2, &other}) WriteChain(*a, *c);
  WriteChain(*b, foreign);
  FlushAll(*a);
  FlushAll(*b);
  a = OpenTier(Config(dir.path(), "model-a"));  // one that indexes b's file too
  FlushAll(*a);
  a->TakeEvents();
  EXPECT_EQ(a->Purge("tenant-a"), 2 + 3 + 1);
  EXPECT_EQ(a->CountPresent(a1.digests, 0), 0);
  EXPECT_EQ(a->CountPresent(a2.digests, 0), 0);
  EXPECT_EQ(a->CountPresent(other.digests, 0), 2);
  EXPECT_FALSE(
      std::filesystem::exists(BlockPath(Config(dir.path(), "model-b"), foreign.digests[0])));
  EXPECT_EQ(a->Stats().purged, 6);
  EXPECT_EQ(a->TakeEvents().size(), 5u);  // removed, of its own identity only
  EXPECT_EQ(a->Purge("tenant-a"), 0);
  EXPECT_EQ(a->Purge(""), 2);
  EXPECT_EQ(a->Stats().blocks, 0);
}

TEST(KvDiskTierTest, AFullQueueDropsWrites) {
  TempDir dir;
  KvDiskTierConfig config = Config(dir.path());
  config.max_queued_write_bytes = kPayloadBytes - 1;
  auto tier = OpenTier(config);
  const Chain chain = MakeChain(tier->root(), "s", 4, 40);
  WriteChain(*tier, chain);
  FlushAll(*tier);
  EXPECT_EQ(tier->Stats().dropped_writes, 4);
  EXPECT_EQ(tier->Stats().writes, 0);
  EXPECT_EQ(tier->CountPresent(chain.digests, 0), 0);
  // A block this tier could not serve back (its payload of another size) is dropped too.
  KvDiskTierConfig roomy = Config(dir.path());
  auto other = OpenTier(roomy);
  other->Write(chain.digests[0], 1, std::nullopt, "s", chain.BlockTokens(0),
               std::vector<uint8_t>(kPayloadBytes + 1));
  FlushAll(*other);
  EXPECT_EQ(other->Stats().dropped_writes, 1);
}

TEST(KvDiskTierTest, CancelledLoadsNeverComeOut) {
  TempDir dir;
  auto tier = OpenTier(Config(dir.path()));
  const Chain chain = MakeChain(tier->root(), "s", 64, 50);
  WriteChain(*tier, chain);
  FlushAll(*tier);
  const uint64_t first = tier->Load(chain.salt, chain.Refs());
  const uint64_t second = tier->Load(chain.salt, chain.Refs());
  tier->Cancel(first);
  tier->Cancel(second);
  // The loader is first in, first out: the third's result means the others are done.
  const KvTierLoad third = LoadNow(*tier, chain.salt, chain.Refs());
  EXPECT_EQ(third.payloads.size(), 64u);
  EXPECT_NE(third.ticket, first);
  EXPECT_TRUE(tier->TakeFinishedLoads().empty());
  // A finished load not yet taken is dropped by its Cancel too.
  const int64_t finished = tier->Stats().load_count;
  const uint64_t fourth = tier->Load(chain.salt, chain.Refs());
  while (tier->Stats().load_count == finished) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  tier->Cancel(fourth);
  EXPECT_TRUE(tier->TakeFinishedLoads().empty());
  // Stopping with loads and writes queued returns promptly.
  for (int i = 0; i < 20; ++i) tier->Load(chain.salt, chain.Refs());
  WriteChain(*tier, MakeChain(tier->root(), "s", 50, 51));
  tier.reset();
}

}  // namespace kv_disk_tier_test
}  // namespace tokenmill::testing
