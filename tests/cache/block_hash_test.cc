#include "cache/block_hash.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace tokenmill {
namespace block_hash_test {

TEST(BlockHashTest, DependsOnParentEveryTokenAndTheExtraKey) {
  const std::vector<TokenId> tokens = {1, 2, 3, 4};
  const BlockHash base = HashBlockTokens(kRootBlockHash, tokens, "");
  EXPECT_EQ(base, HashBlockTokens(kRootBlockHash, tokens, "")) << "must be deterministic";
  std::set<BlockHash> seen = {base};
  EXPECT_TRUE(seen.insert(HashBlockTokens(base, tokens, "")).second) << "parent ignored";
  EXPECT_TRUE(seen.insert(HashBlockTokens(kRootBlockHash, tokens, "tenant-a")).second);
  EXPECT_TRUE(seen.insert(HashBlockTokens(kRootBlockHash, tokens, "tenant-b")).second);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<TokenId> changed = tokens;
    ++changed[i];
    EXPECT_TRUE(seen.insert(HashBlockTokens(kRootBlockHash, changed, "")).second)
        << "token " << i << " ignored";
  }
  // Order matters, and so does where the tokens end.
  EXPECT_TRUE(
      seen.insert(HashBlockTokens(kRootBlockHash, std::vector<TokenId>{4, 3, 2, 1}, "")).second);
  EXPECT_TRUE(
      seen.insert(HashBlockTokens(kRootBlockHash, std::vector<TokenId>{1, 2, 3, 4, 0}, "")).second);
}

TEST(BlockHashTest, NoCollisionsAmongManySmallBlocks) {
  // Every block of 4 tokens over a vocabulary of 16 under two parents: 131072 hashes.
  std::set<BlockHash> seen;
  for (const BlockHash parent : {kRootBlockHash, BlockHash{1}}) {
    for (int code = 0; code < 16 * 16 * 16 * 16; ++code) {
      const std::vector<TokenId> tokens = {code & 15, (code >> 4) & 15, (code >> 8) & 15,
                                           (code >> 12) & 15};
      seen.insert(HashBlockTokens(parent, tokens, ""));
    }
  }
  EXPECT_EQ(seen.size(), 2u * 16 * 16 * 16 * 16);
}

}  // namespace block_hash_test
}  // namespace tokenmill
