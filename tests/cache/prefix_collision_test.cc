// A hash only narrows the search: forced collisions must never serve another prefix's
// K/V, and cache salts keep tenants apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cache/kv_cache_manager.h"
#include "tests/cache/cache_test_util.h"

namespace tokenmill {
namespace prefix_collision_test {

using testing::Blocks;
using testing::Concat;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::TestRequest;

constexpr int kBlockSize = 4;

// Every block collides with every other.
BlockHash ConstantHash(BlockHash, std::span<const TokenId>, std::string_view) { return 42; }

KvCacheConfig Config() { return testing::CacheConfig(16, kBlockSize); }

std::vector<BlockId> RunPrompt(KvCacheManager& manager, TestRequest& request) {
  const PrefixHit hit = manager.GetComputedBlocks(request.view());
  const int num_new = static_cast<int>(request.tokens.size()) - hit.num_tokens;
  EXPECT_TRUE(manager.AllocateSlots(request.view(), num_new, 0, hit).has_value());
  request.num_computed_tokens = static_cast<int>(request.tokens.size());
  manager.CacheComputedBlocks(request.view());
  EXPECT_EQ(manager.CheckInvariants().ToString(), "OK");
  return hit.blocks;
}

TEST(PrefixCollisionTest, CollidingHashesNeverServeAnotherPrefix) {
  KvCacheManager manager(Config(), &ConstantHash);
  // x = [A B C +1], y = [D B C +1]: all blocks share hash 42; y's second and third blocks
  // even hold the same tokens as x's, after a different first block.
  const std::vector<TokenId> a = Blocks(1, kBlockSize, 10);
  const std::vector<TokenId> d = Blocks(1, kBlockSize, 40);
  const std::vector<TokenId> bc = Blocks(2, kBlockSize, 20);
  TestRequest x(1, Concat(Concat(a, bc), {1}));
  TestRequest y(2, Concat(Concat(d, bc), {1}));
  EXPECT_THAT(RunPrompt(manager, x), IsEmpty());
  EXPECT_THAT(manager.BlockTable(x.id), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(RunPrompt(manager, y), IsEmpty()) << "block D collides with A but its tokens differ";
  EXPECT_THAT(manager.BlockTable(y.id), ElementsAre(4, 5, 6, 7));

  // x is freed (its blocks become evictable), y stays in use. A lookup for x's prefix sees
  // y's blocks 5 and 6 first (in-use copies are preferred) with the same hash and tokens,
  // but after the wrong parent: it must still pick x's blocks.
  manager.Free(x.view());
  TestRequest z(3, Concat(Concat(a, bc), {2}));
  EXPECT_THAT(RunPrompt(manager, z), ElementsAre(0, 1, 2));
  TestRequest w(4, Concat(Concat(d, bc), {3}));
  EXPECT_THAT(RunPrompt(manager, w), ElementsAre(4, 5, 6));
  // A prompt that diverges after the first block hits just that block.
  TestRequest v(5, Concat(Concat(a, Blocks(2, kBlockSize, 70)), {3}));
  EXPECT_THAT(RunPrompt(manager, v), ElementsAre(0));
}

TEST(PrefixCollisionTest, CacheSaltSeparatesTenants) {
  KvCacheManager manager(Config());
  const std::vector<TokenId> prompt = Concat(Blocks(3, kBlockSize, 0), {9});
  TestRequest alice(1, prompt, "tenant-alice");
  TestRequest bob(2, prompt, "tenant-bob");
  TestRequest anonymous(3, prompt);
  EXPECT_THAT(RunPrompt(manager, alice), IsEmpty());
  EXPECT_THAT(RunPrompt(manager, bob), IsEmpty()) << "another tenant's equal prompt";
  EXPECT_THAT(RunPrompt(manager, anonymous), IsEmpty());
  TestRequest alice_again(4, prompt, "tenant-alice");
  EXPECT_THAT(RunPrompt(manager, alice_again), ElementsAre(0, 1, 2));
  TestRequest bob_again(5, prompt, "tenant-bob");
  EXPECT_THAT(RunPrompt(manager, bob_again), ElementsAre(4, 5, 6));
}

TEST(PrefixCollisionTest, CacheSaltSeparatesTenantsEvenWhenHashesCollide) {
  KvCacheManager manager(Config(), &ConstantHash);
  const std::vector<TokenId> prompt = Concat(Blocks(2, kBlockSize, 0), {9});
  TestRequest alice(1, prompt, "alice");
  TestRequest bob(2, prompt, "bob");
  EXPECT_THAT(RunPrompt(manager, alice), IsEmpty());
  EXPECT_THAT(RunPrompt(manager, bob), IsEmpty());
  TestRequest bob_again(3, prompt, "bob");
  EXPECT_THAT(RunPrompt(manager, bob_again), ElementsAre(3, 4));
}

}  // namespace prefix_collision_test
}  // namespace tokenmill
