// Prompt-lookup drafting: no model. The last n tokens (n from max down to min) are looked
// up earlier in the prompt and output, and in a request's predicted output (between the
// two); the tokens that followed the latest such occurrence are proposed. Pays off when the
// output repeats, quotes or edits its input or the prediction.
#pragma once

#include <span>
#include <vector>

#include "cache/types.h"
#include "engine/speculative/proposer.h"

namespace tokenmill {

// Up to `k` tokens that followed the latest earlier occurrence of the longest suffix of
// `tokens` of length in [min_n, max_n] that occurs earlier; empty when none does.
std::vector<TokenId> ProposeNgram(std::span<const TokenId> tokens, int min_n, int max_n, int k);

class NgramProposer final : public DraftProposer {
 public:
  NgramProposer(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {}
  StatusOr<std::vector<Proposal>> Propose(std::span<const ProposalRequest> requests) override;

 private:
  int min_n_;
  int max_n_;
};

}  // namespace tokenmill
