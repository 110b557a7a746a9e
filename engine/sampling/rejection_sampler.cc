#include "engine/sampling/rejection_sampler.h"

#include <algorithm>

#include "common/check.h"

namespace tokenmill {

std::vector<TokenId> AcceptArgmaxDrafts(std::span<const TokenId> drafts,
                                        std::span<const int32_t> row_argmax) {
  TM_CHECK_EQ(row_argmax.size(), drafts.size() + 1);
  std::vector<TokenId> out;
  for (size_t k = 0; k <= drafts.size(); ++k) {
    out.push_back(row_argmax[k]);
    if (k == drafts.size() || row_argmax[k] != drafts[k]) break;
  }
  return out;
}

std::vector<SampledToken> VerifyDrafts(Sampler& sampler, const DraftVerification& v) {
  const Request& request = *v.request;
  const size_t num_drafts = v.drafts.size();
  TM_CHECK_EQ(v.logits.size(), (num_drafts + 1) * v.n_vocab);
  const bool stochastic_drafts = !v.draft_probs.empty() && !request.sampling.greedy();
  if (stochastic_drafts) TM_CHECK_EQ(v.draft_probs.size(), num_drafts * v.n_vocab);

  // Row k samples after the verified tokens and drafts[0, k).
  std::vector<TokenId> all(request.token_ids.begin(), request.token_ids.end());
  all.insert(all.end(), v.drafts.begin(), v.drafts.end());
  const std::span<const TokenId> tokens(all);
  const size_t num_prompt = static_cast<size_t>(request.num_prompt_tokens);
  const auto context_of_row = [&](size_t k) {
    return SamplingContext{
        .params = &request.sampling,
        .prompt_token_ids = tokens.first(num_prompt),
        .output_token_ids = tokens.subspan(
            num_prompt, static_cast<size_t>(request.num_output_tokens()) + k)};
  };
  const auto row_logits = [&](size_t k) { return v.logits.subspan(k * v.n_vocab, v.n_vocab); };
  const auto with_logprobs = [&](size_t k, TokenId id) {
    SampledToken token{.token_id = id, .logprobs = std::nullopt};
    if (request.sampling.wants_logprobs()) {
      token.logprobs = ComputeTokenLogprobs(row_logits(k), id, request.sampling.top_logprobs);
    }
    return token;
  };

  std::vector<SampledToken> out;
  if (!stochastic_drafts) {
    for (size_t k = 0; k <= num_drafts; ++k) {
      out.push_back(sampler.Sample(row_logits(k), context_of_row(k)));
      if (k == num_drafts || out.back().token_id != v.drafts[k]) break;
    }
    return out;
  }
  std::vector<float> p(v.n_vocab);
  for (size_t k = 0; k < num_drafts; ++k) {
    const SamplingContext context = context_of_row(k);
    sampler.ComputeProbs(row_logits(k), context, p);
    const std::span<const float> q = v.draft_probs.subspan(k * v.n_vocab, v.n_vocab);
    const TokenId x = v.drafts[k];
    const float px = p[static_cast<size_t>(x)];
    const float qx = q[static_cast<size_t>(x)];
    // x was drawn from q, so qx > 0; min(1, px / qx) without dividing.
    if (Sampler::Uniform(context, RngStream::kAccept) * qx < px) {
      out.push_back(with_logprobs(k, x));
      continue;
    }
    for (size_t i = 0; i < v.n_vocab; ++i) p[i] = std::max(0.0f, p[i] - q[i]);
    out.push_back(with_logprobs(k, Sampler::Draw(p, context, RngStream::kResample)));
    return out;
  }
  out.push_back(sampler.Sample(row_logits(num_drafts), context_of_row(num_drafts)));
  return out;
}

}  // namespace tokenmill
