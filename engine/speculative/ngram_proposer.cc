#include "engine/speculative/ngram_proposer.h"

#include <algorithm>
#include <cstddef>

namespace tokenmill {

std::vector<TokenId> ProposeNgram(std::span<const TokenId> tokens, int min_n, int max_n, int k) {
  const ptrdiff_t size = static_cast<ptrdiff_t>(tokens.size());
  if (k <= 0) return {};
  for (ptrdiff_t n = std::min<ptrdiff_t>(max_n, size - 1); n >= min_n; --n) {
    const std::span<const TokenId> suffix = tokens.last(static_cast<size_t>(n));
    // Latest start first; a match must end before the suffix's last token so that at least
    // one token follows it.
    for (ptrdiff_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const ptrdiff_t from = start + n;
      const ptrdiff_t count = std::min<ptrdiff_t>(k, size - from);
      return std::vector<TokenId>(tokens.begin() + from, tokens.begin() + from + count);
    }
  }
  return {};
}

StatusOr<std::vector<Proposal>> NgramProposer::Propose(
    std::span<const ProposalRequest> requests) {
  std::vector<Proposal> proposals;
  proposals.reserve(requests.size());
  std::vector<TokenId> with_prediction;
  for (const ProposalRequest& r : requests) {
    std::span<const TokenId> tokens = r.token_ids;
    if (!r.predicted_token_ids.empty()) {
      // Prompt, prediction, output: the latest match wins, so the output's own repeats first,
      // then the prediction (what the client expects the output to be), then the prompt.
      const auto output = r.token_ids.begin() + r.num_prompt_tokens;
      with_prediction.assign(r.token_ids.begin(), output);
      with_prediction.insert(with_prediction.end(), r.predicted_token_ids.begin(),
                             r.predicted_token_ids.end());
      with_prediction.insert(with_prediction.end(), output, r.token_ids.end());
      tokens = with_prediction;
    }
    proposals.push_back(
        Proposal{.token_ids = ProposeNgram(tokens, min_n_, max_n_, r.num_drafts), .probs = {}});
  }
  return proposals;
}

}  // namespace tokenmill
