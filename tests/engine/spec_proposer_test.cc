// The pieces of speculative decoding that need no model: n-gram lookup, adaptive k and the
// settings' validation.
#include <gtest/gtest.h>

#include <vector>

#include "engine/speculative/adaptive_k.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/speculative/spec_config.h"

namespace tokenmill {
namespace {

using Ids = std::vector<TokenId>;

TEST(NgramProposerTest, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  //              0  1  2  3  4  5  6  7  8  9
  const Ids tokens{5, 6, 7, 1, 5, 6, 8, 9, 5, 6};
  // "5 6" occurs at 0 and 4; the latest (4) was followed by 8 9 5.
  EXPECT_EQ(ProposeNgram(tokens, 2, 2, 3), (Ids{8, 9, 5}));
  EXPECT_EQ(ProposeNgram(tokens, 2, 2, 1), (Ids{8}));
}

TEST(NgramProposerTest, LongestSuffixWins) {
  // Suffix "1 2 3" occurs at 0 (then 4); suffix "2 3" alone also at 5 (then 9).
  const Ids tokens{1, 2, 3, 4, 0, 2, 3, 9, 1, 2, 3};
  EXPECT_EQ(ProposeNgram(tokens, 1, 3, 2), (Ids{4, 0}));
  EXPECT_EQ(ProposeNgram(tokens, 1, 2, 2), (Ids{9, 1}));
}

TEST(NgramProposerTest, StopsAtTheEndOfTheContext) {
  // "7 8" at 0 is followed by 7 8 (the suffix itself): only what exists is proposed.
  const Ids tokens{7, 8, 7, 8};
  EXPECT_EQ(ProposeNgram(tokens, 2, 2, 5), (Ids{7, 8}));
}

TEST(NgramProposerTest, NothingWithoutAMatchOrBelowMinN) {
  EXPECT_TRUE(ProposeNgram(Ids{1, 2, 3, 4}, 1, 3, 4).empty());
  // Only a 1-gram matches (3 at 1), and min_n is 2.
  EXPECT_TRUE(ProposeNgram(Ids{1, 3, 5, 3}, 2, 3, 4).empty());
  EXPECT_EQ(ProposeNgram(Ids{1, 3, 5, 3}, 1, 3, 4), (Ids{5, 3}));
  EXPECT_TRUE(ProposeNgram(Ids{}, 1, 3, 4).empty());
  EXPECT_TRUE(ProposeNgram(Ids{4}, 1, 3, 4).empty());
  EXPECT_TRUE(ProposeNgram(Ids{1, 1, 1}, 1, 3, 0).empty());
}

TEST(NgramProposerTest, DraftsFromThePredictedOutput) {
  NgramProposer proposer(2, 3);
  // Prompt 1 2 3, output so far 40 41; the prediction holds 40 41 42 43 44.
  const Ids tokens{1, 2, 3, 40, 41};
  const Ids prediction{39, 40, 41, 42, 43, 44};
  ProposalRequest request;
  request.id = 1;
  request.token_ids = tokens;
  request.num_drafts = 3;
  request.num_prompt_tokens = 3;
  ASSERT_TRUE(proposer.Propose({&request, 1})->at(0).token_ids.empty());  // no match without
  request.predicted_token_ids = prediction;
  EXPECT_EQ(proposer.Propose({&request, 1})->at(0).token_ids, (Ids{42, 43, 44}));
  // The output's own repeat is later than the prediction: it wins.
  const Ids repeating{1, 2, 3, 40, 41, 7, 40, 41};
  request.token_ids = repeating;
  EXPECT_EQ(proposer.Propose({&request, 1})->at(0).token_ids, (Ids{7, 40, 41}));
  // The prediction is later than the prompt: it wins over the prompt.
  const Ids in_prompt{40, 41, 50, 40, 41};
  request.token_ids = in_prompt;
  EXPECT_EQ(proposer.Propose({&request, 1})->at(0).token_ids, (Ids{42, 43, 44}));
}

TEST(AdaptiveKTest, TokensPerCostFollowsTheCostModel) {
  // One sequence, every draft accepted: k + 1 tokens for 1 + 0.5 k.
  EXPECT_DOUBLE_EQ(AdaptiveK::TokensPerCost(0, 1.0, 0.5, 1), 1.0);
  EXPECT_DOUBLE_EQ(AdaptiveK::TokensPerCost(4, 1.0, 0.5, 1), 5.0 / 3.0);
  // Half accepted, one draft: 1.5 tokens for 1.5.
  EXPECT_DOUBLE_EQ(AdaptiveK::TokensPerCost(1, 0.5, 0.5, 1), 1.0);
  // Among 8 sequences: (7 + 2) tokens for 1 + 0.5 x 8.
  EXPECT_DOUBLE_EQ(AdaptiveK::TokensPerCost(1, 1.0, 0.5, 8), 9.0 / 5.0);
}

TEST(AdaptiveKTest, StartsAtMaxShrinksOnRejectionAndProbesAtZero) {
  AdaptiveK k;
  EXPECT_EQ(k.Next(4, 0.5, 1), 4);
  for (int i = 0; i < 3; ++i) k.Observe(4, 4);
  EXPECT_EQ(k.Next(4, 0.5, 1), 4);
  for (int i = 0; i < 20; ++i) k.Observe(4, 0);
  EXPECT_LT(k.acceptance(), 0.01);
  // At k = 0: a one-token probe every kProbeInterval steps.
  int probes = 0;
  for (int i = 0; i < 4 * AdaptiveK::kProbeInterval; ++i) probes += k.Next(4, 0.5, 1);
  EXPECT_EQ(probes, 4);
  // 80% accepted: (1 + .8 + ... + .8^k) / (1 + k / 2) is largest at k = 2 (1.22, vs 1.20
  // at k = 1 and 1.18 at k = 3).
  for (int i = 0; i < 60; ++i) k.Observe(5, 4);
  EXPECT_EQ(k.Next(4, 0.5, 1), 2);
  // A cheaper row makes longer drafts pay; a batch of 16 makes none pay.
  EXPECT_EQ(k.Next(4, 0.1, 1), 4);
  EXPECT_EQ(k.Next(4, 0.5, 16), 0);
  // A good run wins speculation back.
  for (int i = 0; i < 10; ++i) k.Observe(1, 1);
  EXPECT_EQ(k.Next(4, 0.5, 1), 4);
}

TEST(SpecConfigTest, ParsesAndValidates) {
  EXPECT_EQ(ParseSpecMethod("ngram"), SpecMethod::kNgram);
  EXPECT_EQ(ParseSpecMethod("draft"), SpecMethod::kDraft);
  EXPECT_EQ(ParseSpecMethod("none"), SpecMethod::kNone);
  EXPECT_FALSE(ParseSpecMethod("eagle").has_value());
  SpecConfig config{.method = SpecMethod::kNgram};
  EXPECT_TRUE(ValidateSpecConfig(config).ok());
  config.num_speculative_tokens = 0;
  EXPECT_NE(ValidateSpecConfig(config).message().find("--spec-tokens"), std::string::npos);
  config.num_speculative_tokens = 4;
  config.ngram_min = 3;
  config.ngram_max = 2;
  EXPECT_FALSE(ValidateSpecConfig(config).ok());
}

}  // namespace
}  // namespace tokenmill
