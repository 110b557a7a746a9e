// Rejection sampling keeps the target's distribution: drafts drawn from a q far from p,
// verified against p, give tokens distributed as p (chi-square over many seeded trials, a
// p-value threshold of 1e-6 on a deterministic sample, so it cannot flake), for the first
// token and for the pair of the first two; the drafts alone fail the same test (the test
// has power). Deterministic drafts draw what plain sampling draws, seed by seed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/sampling/rejection_sampler.h"

namespace tokenmill {
namespace {

constexpr size_t kVocab = 6;
// p = softmax(kLogits) at temperature 1; q puts its mass elsewhere.
const std::vector<float> kLogits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
const std::vector<float> kQ = {0.05f, 0.30f, 0.05f, 0.35f, 0.20f, 0.05f};

std::vector<double> TargetProbs() {
  std::vector<double> p(kVocab);
  double sum = 0.0;
  for (size_t i = 0; i < kVocab; ++i) sum += p[i] = std::exp(double{kLogits[i]});
  for (double& x : p) x /= sum;
  return p;
}

Request SampledRequest(uint64_t seed) {
  NewRequest spec;
  spec.id = 1;
  spec.prompt_token_ids = {1, 2, 3};
  spec.sampling.temperature = 1.0f;
  spec.sampling.seed = seed;
  return Request(std::move(spec), 0);
}

double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * n;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

TEST(RejectionSamplerTest, SampledDraftsKeepTheTargetDistribution) {
  constexpr int kTrials = 20000;
  const std::vector<double> p = TargetProbs();
  std::vector<double> pair_probs;
  for (const double a : p) {
    for (const double b : p) pair_probs.push_back(a * b);  // rows do not depend on context
  }
  std::mt19937_64 draft_rng(7);
  std::discrete_distribution<TokenId> draw_q(kQ.begin(), kQ.end());
  std::vector<float> logits;
  for (int row = 0; row < 3; ++row) logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  std::vector<float> q_rows;
  for (int row = 0; row < 2; ++row) q_rows.insert(q_rows.end(), kQ.begin(), kQ.end());

  Sampler sampler;
  std::vector<int> first(kVocab), pairs(kVocab * kVocab), drafts_alone(kVocab);
  int num_accepted = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const Request request = SampledRequest(1000 + static_cast<uint64_t>(trial));
    const std::vector<TokenId> drafts = {draw_q(draft_rng), draw_q(draft_rng)};
    const std::vector<SampledToken> out =
        VerifyDrafts(sampler, DraftVerification{.request = &request,
                                                .drafts = drafts,
                                                .draft_probs = q_rows,
                                                .logits = logits,
                                                .n_vocab = kVocab});
    ASSERT_GE(out.size(), 1u);
    ASSERT_LE(out.size(), 3u);
    for (size_t k = 0; k + 1 < out.size(); ++k) ASSERT_EQ(out[k].token_id, drafts[k]);
    num_accepted += static_cast<int>(out.size()) - 1;
    ++first[static_cast<size_t>(out[0].token_id)];
    ++drafts_alone[static_cast<size_t>(drafts[0])];
    if (out.size() >= 2) {
      ++pairs[static_cast<size_t>(out[0].token_id) * kVocab + static_cast<size_t>(out[1].token_id)];
    } else {
      // Rejected at once: the second token is drawn at the next step; sample it as plain
      // decoding would, from the next row.
      const Request next = SampledRequest(500000 + static_cast<uint64_t>(trial));
      const std::vector<SampledToken> second = VerifyDrafts(
          sampler, DraftVerification{.request = &next,
                                     .drafts = {},
                                     .draft_probs = {},
                                     .logits = std::span<const float>(logits).first(kVocab),
                                     .n_vocab = kVocab});
      ++pairs[static_cast<size_t>(out[0].token_id) * kVocab +
              static_cast<size_t>(second[0].token_id)];
    }
  }
  // Critical values at p = 1e-6: 35.89 for 5 degrees of freedom, 89.95 for 35.
  EXPECT_LT(ChiSquare(first, p, kTrials), 35.89);
  EXPECT_LT(ChiSquare(pairs, pair_probs, kTrials), 89.95);
  EXPECT_GT(ChiSquare(drafts_alone, p, kTrials), 35.89) << "the test must tell q from p";
  // Acceptance of one draft is sum min(p, q) = 0.44 here: rejection really happened, and
  // acceptance did too.
  EXPECT_GT(num_accepted, kTrials / 4);
  EXPECT_LT(num_accepted, kTrials);
}

TEST(RejectionSamplerTest, DeterministicDraftsDrawWhatPlainSamplingDraws) {
  Sampler sampler;
  std::vector<float> logits;
  for (int row = 0; row < 4; ++row) logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  int num_accepted = 0;
  for (uint64_t seed = 1; seed <= 500; ++seed) {
    Request request = SampledRequest(seed);
    // Plain sampling, token by token.
    std::vector<TokenId> plain;
    for (int k = 0; k < 4; ++k) {
      const std::vector<SampledToken> one = VerifyDrafts(
          sampler, DraftVerification{.request = &request,
                                     .drafts = {},
                                     .draft_probs = {},
                                     .logits = std::span<const float>(logits).first(kVocab),
                                     .n_vocab = kVocab});
      plain.push_back(one[0].token_id);
      request.token_ids.push_back(one[0].token_id);
    }
    // The same request verifying three n-gram drafts: token 0 three times.
    const Request fresh = SampledRequest(seed);
    const std::vector<TokenId> drafts = {0, 0, 0};
    const std::vector<SampledToken> out =
        VerifyDrafts(sampler, DraftVerification{.request = &fresh,
                                                .drafts = drafts,
                                                .draft_probs = {},
                                                .logits = logits,
                                                .n_vocab = kVocab});
    num_accepted += static_cast<int>(out.size()) - 1;
    for (size_t k = 0; k < out.size(); ++k) {
      EXPECT_EQ(out[k].token_id, plain[k]) << "seed " << seed << " token " << k;
    }
  }
  EXPECT_GT(num_accepted, 100);
}

// The argmax-only path (ModelRunner's greedy steps): drafts stand while they equal their row's
// argmax, then the first row that differs (or the last row) gives one more token.
TEST(RejectionSamplerTest, ArgmaxDraftsStandWhileTheyAreTheArgmax) {
  const std::vector<TokenId> drafts = {5, 6, 7};
  EXPECT_EQ(AcceptArgmaxDrafts(drafts, std::vector<int32_t>{5, 6, 9, 1}),
            (std::vector<TokenId>{5, 6, 9}));
  EXPECT_EQ(AcceptArgmaxDrafts(drafts, std::vector<int32_t>{5, 6, 7, 1}),
            (std::vector<TokenId>{5, 6, 7, 1}));
  EXPECT_EQ(AcceptArgmaxDrafts(drafts, std::vector<int32_t>{4, 6, 7, 1}),
            (std::vector<TokenId>{4}));
  EXPECT_EQ(AcceptArgmaxDrafts({}, std::vector<int32_t>{3}), (std::vector<TokenId>{3}));
}

}  // namespace
}  // namespace tokenmill
