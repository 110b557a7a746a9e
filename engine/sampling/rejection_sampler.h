// Verifies one request's draft tokens against the target's logits rows, keeping the target's
// distribution exactly (speculative sampling, Leviathan et al. 2023 / Chen et al. 2023).
//
// Row k holds the target's logits after the verified tokens and drafts[0, k); p_k is the
// distribution the Sampler would draw from there (ComputeProbs).
// - Deterministic drafts (n-gram; a greedy draft model), q_k one-hot at x_k: each row draws
//   y_k from p_k exactly as plain decoding would (RngStream::kSample at the same output
//   position) and x_k stands while y_k == x_k. That accepts x_k with probability p_k(x_k)
//   and otherwise yields a draw from p_k without x_k, renormalized: rejection sampling for
//   a one-hot q. So a seeded request draws the very tokens plain decoding draws.
// - Drafts sampled from a draft model's q_k: x_k stands when Uniform(kAccept) < p_k(x_k) /
//   q_k(x_k); the first rejected one is replaced by a draw from norm(max(0, p_k - q_k))
//   (kResample). When all stand, one more token is drawn from the last row.
// Greedy requests take the first path: p_k is one-hot, so a draft stands iff it is the argmax.
#pragma once

#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sampling/sampler.h"
#include "scheduler/request.h"

namespace tokenmill {

// Per request, the q rows of its pending drafts (Proposal::probs in engine/speculative/proposer.h),
// for the next step's verification.
using DraftProbs = std::unordered_map<RequestId, std::vector<float>>;

struct DraftVerification {
  const Request* request = nullptr;          // its verified tokens and sampling parameters
  std::span<const TokenId> drafts;           // x_0 .. x_{n-1}
  // q_0 .. q_{n-1}, n rows of n_vocab, or empty for deterministic drafts.
  std::span<const float> draft_probs;
  // 1 + drafts.size() rows of n_vocab target logits.
  std::span<const float> logits;
  size_t n_vocab = 0;
};

// Accepted drafts then one more token (1 to 1 + n tokens), with logprobs when the request
// asked for them.
std::vector<SampledToken> VerifyDrafts(Sampler& sampler, const DraftVerification& v);

// VerifyDrafts for a request whose rows pick the raw argmax (PicksTheRawArgmax), from the
// 1 + drafts.size() rows' argmax alone: drafts stand while they equal it, then one more.
std::vector<TokenId> AcceptArgmaxDrafts(std::span<const TokenId> drafts,
                                        std::span<const int32_t> row_argmax);

}  // namespace tokenmill
