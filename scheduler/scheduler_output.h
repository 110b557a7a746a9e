// What crosses between the scheduler and the engine each step:
//   Schedule() -> SchedulerOutput -> runner -> ModelOutput -> Update() -> RequestEvents.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "cache/types.h"
#include "scheduler/request.h"

namespace tokenmill {

// One request's share of a step: its rows are positions
// [num_computed_tokens, num_computed_tokens + num_new_tokens) of its sequence in the cache
// (which differ from token indices once a kv_window evicted tokens).
struct ScheduledRequest {
  RequestId id = 0;
  int num_computed_tokens = 0;  // before this step: the position of the first new token
  int num_new_tokens = 0;       // rows this step, draft tokens included
  int num_draft_tokens = 0;     // of those, the trailing draft tokens to verify
  // The tokens of the rows: verified tokens, then draft tokens.
  std::vector<TokenId> token_ids;
  // More than one verified token to compute: a prompt chunk, or a recompute after preemption.
  bool is_prefill = false;
  // The trailing rows that need logits: 0 for a prompt chunk that does not reach the end,
  // else 1 + num_draft_tokens (each draft is checked against the logits of the row before it).
  int num_logits = 0;
  // Admitted (or resumed after preemption) this step: the runner starts its state afresh.
  bool first_scheduled = false;
  std::vector<BlockId> block_table;     // the whole table, after this step's allocation
  std::vector<BlockId> new_block_ids;   // allocated this step (already in block_table)
  // KV group 1's (sliding-window layers) table, as long as block_table, kReleasedBlock where
  // a block lay wholly before the window; empty without that group.
  std::vector<BlockId> sliding_block_table;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> requests;  // batch order: running first, then admitted
  int num_batched_tokens = 0;
  // Sent back to the queue this step; the runner drops their state.
  std::vector<RequestId> preempted_ids;
  // Finished or aborted since the previous Schedule(); the runner drops their state.
  std::vector<RequestId> finished_ids;
  // K/V the runner copies, in order, before this step's forward pass: the partial last blocks
  // of requests forked since the last step that ran (Scheduler::Fork).
  std::vector<BlockCopy> block_copies;

  bool empty() const { return requests.empty(); }
};

// What the runner and sampler return for one request that had num_logits > 0.
struct SampledTokens {
  RequestId id = 0;
  // Accepted draft tokens then one sampled token: 1 to 1 + num_draft_tokens ids. None: the
  // request is parked, all its tokens computed, until the engine gives it its next token
  // (Scheduler::Extend; beam search decides the tokens of all of a request's beams at once).
  std::vector<TokenId> token_ids;
  // Proposals to verify next step (speculative decoding); empty without a drafter.
  std::vector<TokenId> next_draft_token_ids;
};

struct ModelOutput {
  std::vector<SampledTokens> requests;
};

// What Update() tells the engine to stream for one request.
struct RequestEvent {
  RequestId id = 0;
  std::vector<TokenId> new_token_ids;  // appended this step (a stop token included)
  std::optional<FinishReason> finish_reason;
  int num_prompt_tokens = 0;
  int num_cached_prompt_tokens = 0;
  int num_output_tokens = 0;
  int num_evicted_tokens = 0;  // tokens evicted from its K/V so far (kv_window)
};

}  // namespace tokenmill
