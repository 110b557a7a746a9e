// The seam between speculative decoding and whatever drafts the tokens (n-gram lookup, a
// draft model). Called on the engine thread after each step's sampling.
#pragma once

#include <span>
#include <vector>

#include "cache/types.h"
#include "common/status.h"
#include "scheduler/request.h"

namespace tokenmill {

struct ProposalRequest {
  RequestId id = 0;
  // The request's verified tokens, this step's sampled ones included (the last one has no
  // K/V in the target's cache yet).
  std::span<const TokenId> token_ids;
  int num_drafts = 0;  // wanted, >= 1
  // The request's sampling parameters, and where its prompt ends in token_ids: a draft
  // model samples its drafts as the request samples.
  const SamplingParams* sampling = nullptr;
  int num_prompt_tokens = 0;
  // The request's block table after this step's allocation (draft models address their
  // own KV through it).
  std::span<const BlockId> block_table;
  // Tokens the output will likely repeat (the request's predicted output); may be empty.
  std::span<const TokenId> predicted_token_ids;
};

struct Proposal {
  std::vector<TokenId> token_ids;  // at most num_drafts; may be empty
  // The draft distributions q the tokens were drawn from (token_ids.size() rows of the
  // vocabulary), for rejection sampling; empty when the drafts are deterministic (n-gram
  // lookup, greedy requests).
  std::vector<float> probs;
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // One proposal per request, in order.
  virtual StatusOr<std::vector<Proposal>> Propose(std::span<const ProposalRequest> requests) = 0;
  // The request finished, was preempted or restarted: whatever the proposer kept for it
  // (e.g. draft K/V in its blocks) is no longer valid.
  virtual void Forget(RequestId /*id*/) {}
  // The target's pool gave blocks [first_block, end_block) back (engine/elastic_kv.h): a KV
  // pool over the same block ids lets their memory go too.
  virtual Status ReleaseKv(int64_t /*first_block*/, int64_t /*end_block*/) { return OkStatus(); }
};

}  // namespace tokenmill
