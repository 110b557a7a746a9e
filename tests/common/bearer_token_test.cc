#include "common/bearer_token.h"

#include <gtest/gtest.h>

namespace tokenmill {
namespace {

TEST(BearerToken, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3creT"));
  EXPECT_FALSE(ConstantTimeEquals("s3cre", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret!", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
}

TEST(BearerToken, MatchesTheSchemeInAnyCaseAndTheKeyExactly) {
  EXPECT_TRUE(BearerTokenMatches("Bearer s3cret", "s3cret"));
  EXPECT_TRUE(BearerTokenMatches("bearer s3cret", "s3cret"));
  EXPECT_TRUE(BearerTokenMatches("BEARER s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Bearer s3creT", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Bearer  s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Basic s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Bearer", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("", "s3cret"));
}

}  // namespace
}  // namespace tokenmill
