// The Sampler's contract with hand-computed expectations: greedy is the argmax, each
// processor's effect on a small row, the RNG is a pure function of its key, and Sample draws
// exactly what ComputeProbs + Draw (the speculative decoding API) would. The distributions
// themselves are checked against NumPy in test_sampling_numpy.py.
#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "engine/sampling/logits_processors.h"
#include "engine/sampling/rng.h"

namespace tokenmill {
namespace {

SamplingContext Context(const SamplingParams& params, const std::vector<TokenId>& prompt,
                        const std::vector<TokenId>& output) {
  return SamplingContext{.params = &params, .prompt_token_ids = prompt,
                         .output_token_ids = output};
}

std::vector<float> Probs(Sampler& sampler, const std::vector<float>& logits,
                         const SamplingContext& context) {
  std::vector<float> probs(logits.size());
  sampler.ComputeProbs(logits, context, probs);
  return probs;
}

TEST(SamplerTest, GreedyIsTheRawArgmaxWithTheLowestIdOnTies) {
  Sampler sampler;
  const SamplingParams params;  // temperature 0
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(sampler.Sample(logits, Context(params, {1}, {})).token_id, 1);
  EXPECT_EQ(Probs(sampler, logits, Context(params, {1}, {})),
            (std::vector<float>{0, 1, 0, 0}));
}

// Argmax against its definition (a left-to-right scan keeping the first strictly larger
// logit) on vocabulary-sized rows with many ties, -inf, NaN and a maximum in every position
// class relative to its vectorized passes (first, last, block edges).
TEST(SamplerTest, ArgmaxIsTheFirstStrictlyLargestLogitOfALeftToRightScan) {
  auto scan = [](const std::vector<float>& x) {
    size_t best = 0;
    for (size_t i = 1; i < x.size(); ++i) {
      if (x[i] > x[best]) best = i;
    }
    return static_cast<TokenId>(best);
  };
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> level(-3, 3);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (size_t n : {size_t{1}, size_t{15}, size_t{17}, size_t{64}, size_t{100}, size_t{49152}}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(n);
      for (float& v : x) v = static_cast<float>(level(rng));  // many ties
      const size_t at = trial % 4 == 0 ? 0 : trial % 4 == 1 ? n - 1 : rng() % n;
      if (trial % 5 == 0) x[at] = 7.0f;
      if (trial % 7 == 0) x[rng() % n] = nan;
      if (trial % 11 == 0) x[0] = nan;
      if (trial % 13 == 0) std::fill(x.begin(), x.end(), -inf);
      if (trial % 17 == 0) x[rng() % n] = -0.0f;
      ASSERT_EQ(Argmax(x), scan(x)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 4.0f};
  std::vector<int> counts(4, 0);
  const std::vector<TokenId> prompt = {0, 0};
  const std::vector<TokenId> output = {1};
  ApplyPenalties(logits, prompt, output, 2.0f, 0.0f, 0.0f, counts);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.0f, 4.0f}));
  EXPECT_EQ(counts, (std::vector<int>(4, 0)));
}

TEST(SamplerTest, FrequencyAndPresencePenalizeOutputTokensOnly) {
  std::vector<float> logits = {2.0f, 2.0f, 2.0f, 2.0f};
  std::vector<int> counts(4, 0);
  const std::vector<TokenId> prompt = {3};
  const std::vector<TokenId> output = {1, 2, 1, 1};
  ApplyPenalties(logits, prompt, output, 1.0f, 0.5f, 0.25f, counts);
  EXPECT_EQ(logits, (std::vector<float>{2.0f, 2.0f - 1.5f - 0.25f, 2.0f - 0.5f - 0.25f, 2.0f}));
  EXPECT_EQ(counts, (std::vector<int>(4, 0)));
}

TEST(SamplerTest, MinTokensMasksEndOfGenerationAndStopIdsUntilReached) {
  Sampler sampler(/*end_of_generation_ids=*/{2});
  SamplingParams params;
  params.min_tokens = 2;
  params.stop_token_ids = {3};
  const std::vector<float> logits = {0.0f, 1.0f, 5.0f, 4.0f};
  EXPECT_EQ(sampler.Sample(logits, Context(params, {0}, {1})).token_id, 1);
  EXPECT_EQ(sampler.Sample(logits, Context(params, {0}, {1, 1})).token_id, 2);
  params.ignore_eos = true;  // EOS cannot stop it, so it is not masked
  EXPECT_EQ(sampler.Sample(logits, Context(params, {0}, {1})).token_id, 2);
}

TEST(SamplerTest, LogitBiasMovesTheGreedyChoice) {
  Sampler sampler;
  SamplingParams params;
  params.logit_bias = {{0, 10.0f}, {1, -100.0f}};
  EXPECT_EQ(sampler.Sample(std::vector<float>{1.0f, 5.0f, 2.0f}, Context(params, {0}, {})).token_id,
            0);
}

TEST(SamplerTest, TopKTopPAndMinPKeepTheExpectedIds) {
  Sampler sampler;
  SamplingParams params;
  params.temperature = 1.0f;
  // softmax of log(0.4, 0.3, 0.2, 0.1) is (0.4, 0.3, 0.2, 0.1).
  const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                                     std::log(0.1f)};
  params.top_k = 2;
  std::vector<float> p = Probs(sampler, logits, Context(params, {0}, {}));
  EXPECT_NEAR(p[0], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(p[1], 0.3 / 0.7, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  params.top_k = 0;
  params.top_p = 0.75f;  // 0.4 + 0.3 < 0.75: the third stays
  p = Probs(sampler, logits, Context(params, {0}, {}));
  EXPECT_NEAR(p[2], 0.2 / 0.9, 1e-6);
  EXPECT_EQ(p[3], 0.0f);
  params.top_p = 1.0f;
  params.min_p = 0.45f;  // keeps p >= 0.18
  p = Probs(sampler, logits, Context(params, {0}, {}));
  EXPECT_NEAR(p[2], 0.2 / 0.9, 1e-6);
  EXPECT_EQ(p[3], 0.0f);
}

TEST(SamplerTest, RngIsAPureFunctionOfItsKeyAndStream) {
  const RngKey key{.seed = 42, .sequence_index = 1, .position = 7};
  EXPECT_EQ(RandomBits(key, RngStream::kSample), RandomBits(key, RngStream::kSample));
  std::set<uint64_t> seen;
  for (const RngKey k : {key, RngKey{43, 1, 7}, RngKey{42, 0, 7}, RngKey{42, 1, 8}}) {
    for (const RngStream s : {RngStream::kSample, RngStream::kAccept, RngStream::kResample}) {
      seen.insert(RandomBits(k, s));
      const double u = RandomUniform(k, s);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
    }
  }
  EXPECT_EQ(seen.size(), 12u);
}

TEST(SamplerTest, SampleDrawsWhatComputeProbsAndDrawGiveAndDependsOnlyOnItsKey) {
  Sampler sampler;
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_p = 0.9f;
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  std::set<TokenId> distinct;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    params.seed = seed;
    const std::vector<TokenId> output = {5, 6, static_cast<TokenId>(seed % 7)};
    const SamplingContext context = Context(params, {1, 2}, output);
    const TokenId token = sampler.Sample(logits, context).token_id;
    EXPECT_EQ(token, Sampler::Draw(Probs(sampler, logits, context), context, RngStream::kSample));
    EXPECT_EQ(token, sampler.Sample(logits, context).token_id) << "seed " << seed;
    distinct.insert(token);
  }
  EXPECT_GT(distinct.size(), 5u);
}

TEST(SamplerTest, DrawWalksTheCdfInIdOrder) {
  SamplingParams params;
  const std::vector<float> weights = {0.0f, 1.0f, 0.0f, 3.0f};  // unnormalized
  int ones = 0;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    params.seed = seed;
    const SamplingContext context = Context(params, {0}, {});
    const double u = Sampler::Uniform(context, RngStream::kResample);
    const TokenId expected = u * 4.0 < 1.0 ? 1 : 3;
    EXPECT_EQ(Sampler::Draw(weights, context, RngStream::kResample), expected);
    ones += expected == 1;
  }
  EXPECT_GT(ones, 0);
  EXPECT_LT(ones, 64);
  const std::vector<float> zeros = {0.0f, 0.0f};
  EXPECT_EQ(Sampler::Draw(zeros, Context(params, {0}, {}), RngStream::kResample), 0);
}

TEST(SamplerTest, LogprobsAreTheRawLogSoftmax) {
  Sampler sampler;
  SamplingParams params;
  params.top_logprobs = 2;
  params.logit_bias = {{2, 50.0f}};  // changes the choice, not the reported logprobs
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  const SampledToken token = sampler.Sample(logits, Context(params, {0}, {}));
  ASSERT_EQ(token.token_id, 2);
  ASSERT_TRUE(token.logprobs.has_value());
  const double log_z = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0));
  EXPECT_NEAR(token.logprobs->chosen.logprob, 2.0 - log_z, 1e-6);
  ASSERT_EQ(token.logprobs->top.size(), 2u);
  EXPECT_EQ(token.logprobs->top[0].token_id, 1);
  EXPECT_NEAR(token.logprobs->top[0].logprob, 3.0 - log_z, 1e-6);
  EXPECT_EQ(token.logprobs->top[1].token_id, 2);
}

// A token's rank is its place in the whole vocabulary (vLLM's), inside the top or not, in the
// order `top` lists: ties go to the lower id.
TEST(SamplerTest, LogprobsRankTheChosenTokenInTheWholeVocabulary) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 0.5f};
  EXPECT_EQ(ComputeTokenLogprobs(logits, 1, 0).chosen.rank, 1);
  EXPECT_EQ(ComputeTokenLogprobs(logits, 3, 0).chosen.rank, 2);  // tied with 1, a higher id
  EXPECT_EQ(ComputeTokenLogprobs(logits, 4, 2).chosen.rank, 5);  // outside the top 2
  const TokenLogprobs all = ComputeTokenLogprobs(logits, 0, 5);
  ASSERT_EQ(all.top.size(), 5u);
  for (size_t k = 0; k < all.top.size(); ++k) EXPECT_EQ(all.top[k].rank, static_cast<int>(k) + 1);
  EXPECT_EQ(all.chosen.rank, 4);
  EXPECT_EQ(all.top[3].token_id, 0);
}

}  // namespace
}  // namespace tokenmill
