// Speculative decoding's bookkeeping around a proposer: after each step it records how many
// of each request's drafts the target accepted (counters and adaptive k), then asks the
// proposer for the next drafts, which the scheduler gives lookahead slots and the runner
// verifies in the next step's forward pass. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "common/status.h"
#include "engine/sampling/rejection_sampler.h"
#include "engine/speculative/adaptive_k.h"
#include "engine/speculative/proposer.h"
#include "engine/speculative/spec_config.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_output.h"

namespace tokenmill {

// Counters; they only grow. acceptance = accepted / draft tokens; mean tokens per verifying
// step = 1 + accepted / drafts.
struct SpecStats {
  int64_t num_drafts = 0;           // verifications of at least one draft token
  int64_t num_draft_tokens = 0;     // draft tokens verified
  int64_t num_accepted_tokens = 0;  // of those, accepted
};

class Speculator {
 public:
  Speculator(const SpecConfig& config, std::unique_ptr<DraftProposer> proposer);

  // `step` ran and `sampled` holds its tokens (Update not yet applied): counts the verified
  // drafts, then fills each request's next_draft_token_ids.
  Status AfterStep(const SchedulerOutput& step, const Scheduler& scheduler,
                   ModelOutput& sampled);

  const SpecStats& stats() const { return stats_; }
  // DraftProposer::ReleaseKv.
  Status ReleaseKv(int64_t first_block, int64_t end_block) {
    return proposer_->ReleaseKv(first_block, end_block);
  }
  // The q rows of the drafts proposed by the last AfterStep (for the runner's verification).
  const DraftProbs& draft_probs() const { return draft_probs_; }

 private:
  // The k each request gets this step: its adaptive k, then all capped so that the next
  // step's rows stay within max_batch_rows.
  std::vector<int> PlanDrafts(const SchedulerOutput& step, const Scheduler& scheduler,
                              const ModelOutput& sampled);

  SpecConfig config_;
  std::unique_ptr<DraftProposer> proposer_;
  std::unordered_map<RequestId, AdaptiveK> adaptive_;  // live requests that sampled
  DraftProbs draft_probs_;
  SpecStats stats_;
};

}  // namespace tokenmill
