// Drafting with a smaller model of the same vocabulary, on the target's device with its own
// paged KV: a second KV pool over the same block ids as the target, so the target's block
// tables address both. The draft's K/V of a request's verified tokens stay in its
// blocks between steps (recomputed from scratch after admission, preemption or a prefix
// hit, so K/V never come from another request's draft); its K/V of draft tokens go to
// positions past the verified ones, in the request's lookahead blocks or, beyond its table,
// in scratch blocks after the pool's, and are overwritten next time.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/forward_backend.h"
#include "engine/sampling/sampler.h"
#include "engine/speculative/proposer.h"
#include "model/model.h"

namespace tokenmill {

// InvalidArgument unless `draft` can draft for `target`: the same token list (so ids mean the
// same text). The message names both vocabularies.
Status CheckDraftVocabulary(const Model& target, const Model& draft);

class DraftModelProposer final : public DraftProposer {
 public:
  // Scratch blocks the draft's KV pool needs past the target's num_blocks.
  static int NumScratchBlocks(int max_requests, int max_drafts, int block_size);

  // `draft` must outlive the proposer; `backend` runs it, with a KV pool of num_blocks +
  // NumScratchBlocks(...) blocks allocated. num_blocks and block_size are the target's
  // pool's; at most `max_requests` requests draft at most `max_drafts` tokens per call.
  DraftModelProposer(const Model& draft, std::unique_ptr<ForwardBackend> backend,
                     int64_t num_blocks, int block_size, int max_requests, int max_drafts,
                     std::vector<TokenId> end_of_generation_ids);

  StatusOr<std::vector<Proposal>> Propose(std::span<const ProposalRequest> requests) override;
  void Forget(RequestId id) override { num_computed_.erase(id); }
  // Every draft KV group reads the target's group-0 ids. What a block held is recomputed
  // before it is read again (nothing is kept past Forget), so its bytes may go.
  Status ReleaseKv(int64_t first_block, int64_t end_block) override;

 private:
  const Model& draft_;
  std::unique_ptr<ForwardBackend> backend_;  // KV: num_blocks_ pool blocks, then scratch
  int64_t num_blocks_;
  int block_size_;
  int num_scratch_blocks_;
  // Per request: its leading tokens whose draft K/V are valid in its blocks.
  std::unordered_map<RequestId, int> num_computed_;
  std::vector<float> logits_;
  Sampler sampler_;  // the request's processing of the draft's logits into q
  std::vector<float> q_;
};

}  // namespace tokenmill
