#include "cache/tiers/block_digest.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace tokenmill {
namespace block_digest_test {

TEST(BlockDigestTest, Sha256MatchesFipsVectors) {
  EXPECT_EQ(DigestHex(Sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(DigestHex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestHex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(DigestHex(Sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

std::vector<TokenId> Tokens(int count, int base = 0) {
  std::vector<TokenId> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back(base + i * 7 - 3);
  return tokens;
}

TEST(BlockDigestTest, ChainIsTheLinksAndFollowsTheFormula) {
  const BlockDigest root = IdentityDigest("model");
  const std::vector<TokenId> tokens = Tokens(4 * 5 + 3);  // 5 full blocks and a partial one
  const std::vector<BlockDigest> chain = ChainBlockDigests(root, "salt", tokens, 4);
  ASSERT_EQ(chain.size(), 5u);
  const std::span<const TokenId> all(tokens);
  EXPECT_EQ(chain[0], NextBlockDigest(root, nullptr, "salt", all.subspan(0, 4)));
  for (size_t i = 1; i < chain.size(); ++i) {
    EXPECT_EQ(chain[i], NextBlockDigest(root, &chain[i - 1], "salt", all.subspan(i * 4, 4)));
  }
  // d_0 = SHA-256(root || u32 salt size || salt || tokens as little-endian int32).
  std::string bytes(root.begin(), root.end());
  bytes += std::string("\x04\x00\x00\x00", 4) + "salt";
  for (int i = 0; i < 4; ++i) {
    const auto value = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(value >> (8 * b)));
  }
  EXPECT_EQ(chain[0], Sha256(bytes));
}

TEST(BlockDigestTest, SaltIdentityAndEveryTokenChangeEveryDigest) {
  const std::vector<TokenId> tokens = Tokens(12);
  const auto base = ChainBlockDigests(IdentityDigest("model"), "a", tokens, 4);
  const auto other_salt = ChainBlockDigests(IdentityDigest("model"), "b", tokens, 4);
  const auto other_identity = ChainBlockDigests(IdentityDigest("model2"), "a", tokens, 4);
  // The salt's length is framed: "a" + tokens never equals "" + other tokens.
  const auto empty_salt = ChainBlockDigests(IdentityDigest("model"), "", tokens, 4);
  std::set<BlockDigest> seen(base.begin(), base.end());
  for (const auto* other : {&other_salt, &other_identity, &empty_salt}) {
    for (const BlockDigest& d : *other) EXPECT_TRUE(seen.insert(d).second);
  }
  // A token changes its block's digest and every later one, never an earlier one.
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::vector<TokenId> changed = tokens;
    ++changed[t];
    const auto digests = ChainBlockDigests(IdentityDigest("model"), "a", changed, 4);
    for (size_t b = 0; b < digests.size(); ++b) {
      EXPECT_EQ(digests[b] == base[b], b < t / 4) << "token " << t << " block " << b;
    }
  }
}

TEST(BlockDigestTest, PriorIsExtendedNotRecomputed) {
  const BlockDigest root = IdentityDigest("model");
  const std::vector<TokenId> tokens = Tokens(40);
  const auto full = ChainBlockDigests(root, "s", tokens, 4);
  const auto head = ChainBlockDigests(root, "s", std::span<const TokenId>(tokens).first(12), 4);
  ASSERT_EQ(head.size(), 3u);
  EXPECT_EQ(ChainBlockDigests(root, "s", tokens, 4, head), full);
  // Taken as given: a wrong prior shows in every digest after it.
  std::vector<BlockDigest> wrong = head;
  wrong[2][0] ^= 1;
  const auto extended = ChainBlockDigests(root, "s", tokens, 4, wrong);
  EXPECT_EQ(extended[2], wrong[2]);
  EXPECT_NE(extended[3], full[3]);
  // A prior longer than the tokens' blocks is cut to them.
  EXPECT_EQ(ChainBlockDigests(root, "s", std::span<const TokenId>(tokens).first(8), 4, full),
            std::vector<BlockDigest>(full.begin(), full.begin() + 2));
  EXPECT_TRUE(ChainBlockDigests(root, "s", std::span<const TokenId>(tokens).first(3), 4).empty());
}

TEST(BlockDigestTest, HexIsLowerCase) {
  BlockDigest digest{};
  digest[0] = 0xAB;
  digest[31] = 0x0F;
  const std::string hex = DigestHex(digest);
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.substr(0, 2), "ab");
  EXPECT_EQ(hex.substr(62), "0f");
}

}  // namespace block_digest_test
}  // namespace tokenmill
