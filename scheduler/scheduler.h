// The continuous-batching scheduler: which requests run each step and how many tokens each
// computes (docs/design.md section 3, "Requests catch up" and "Admission and preemption").
//
// One engine thread owns it, with the KvCacheManager it allocates from; no locks. Each step:
//   out = Schedule();  the runner computes out's rows and samples where num_logits > 0;
//   events = Update(sampled tokens);  the engine streams the events.
// Add, Abort and FinishRequest come between steps (the engine applies its inbox first).
//
// A step serves running requests first, in admission order, then admits waiting ones by
// (priority, arrival) while the token budget, max_num_seqs and the KV pool allow. A running
// request that cannot get its next block preempts the lowest-priority, latest-arrived
// running request (possibly itself): its blocks go back (its prefix stays cached) and it
// recomputes later, with the same tokens. No request is admitted in a step that preempted.
//
// Tenants (Request::tenant) share the batch and the pool fairly: among equal priorities the
// waiting request of the tenant with the fewest running sequences goes first (WaitingQueue),
// the victim is one of the tenant with the most, and when no seat or block is left, a waiting
// request takes one from another tenant that runs at least two sequences more than its own
// (its latest, of no higher priority). So a small request of one tenant is admitted within a
// step or two while another tenant's hog fills the pool; with one tenant nothing changes.
// A full queue (--max-queue) still takes a tenant below its share of it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "common/status.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/scheduler_output.h"
#include "scheduler/tenant_counts.h"
#include "scheduler/waiting_queue.h"

namespace tokenmill {

// Counters for metrics; the int64 ones only grow.
struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;  // preempted ones included
  int64_t num_preemptions = 0;
  int64_t num_prompt_tokens = 0;      // prompt tokens computed (prefix-cache hits excluded)
  int64_t num_generation_tokens = 0;  // tokens appended by Update
  int64_t num_prefix_query_tokens = 0;  // tokens of admitted requests looked up in the cache
  int64_t num_prefix_hit_tokens = 0;    // of those, served by the prefix cache
  int64_t num_finished = 0;
  int64_t num_evicted_tokens = 0;  // dropped from kv_window requests' K/V
  double kv_usage = 0.0;  // fraction of KV blocks in use
};

class Scheduler {
 public:
  // `config` must pass ValidateSchedulerConfig. `kv_cache` must outlive the scheduler and
  // is used by it alone.
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv_cache);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The context length requests are held to: the configured one, or less when the KV pool
  // (minus the admission watermark) holds fewer tokens, so that any admitted request can
  // always grow once it runs alone; with whole_prompts, at most a step's token budget.
  int max_model_len() const { return max_model_len_; }

  // Queues a request. InvalidArgument for an empty or never-fitting prompt, max_tokens < 1
  // or a duplicate id; ResourceExhausted when max_queue requests are already waiting.
  Status Add(NewRequest request);

  // Ends the request in any state: its blocks are freed at once and its id appears in the
  // next SchedulerOutput's finished_ids. kAbort for a cancelled client, kStop for a stop
  // string. NotFound when no such request is live.
  Status FinishRequest(RequestId id, FinishReason reason);
  Status Abort(RequestId id) { return FinishRequest(id, FinishReason::kAbort); }

  // Decides the next step and allocates its KV slots. Empty when nothing can run.
  SchedulerOutput Schedule();

  // Applies the sampled tokens of the last Schedule()'s requests with num_logits > 0 (every
  // such request still live must have an entry): rolls back rejected drafts, appends
  // tokens, stops requests on EOS / stop ids / max_tokens / context length and frees their
  // blocks. Ends the embeddings whose prompt the step completed (kStop, no token). Returns
  // one event per request that got tokens or ended so.
  std::vector<RequestEvent> Update(const ModelOutput& output);

  // The LoRA adapters (Request::lora, each once, ascending) of the running requests and of the
  // waiting ones: a walk over every live request, kept out of Stats, which each step reads.
  void ActiveLoras(std::vector<int>& running, std::vector<int>& waiting) const;

  // Beam search: Update parks a request it gets no token for (Request::parked). Fork adds
  // `child_id` as a copy of the live parked request `parent_id`, parked too: when the parent
  // runs and a seat is free, running beside it with the parent's full KV blocks shared and
  // its partial last block copied (the next step's block_copies), else waiting to recompute
  // (from its cached prefix blocks). InvalidArgument for a used child id, NotFound for no
  // such parent.
  Status Fork(RequestId parent_id, RequestId child_id);
  // Appends `token` to the live parked request `id`, which then computes it; a stop
  // condition (max_tokens, the context length, an end-of-generation or stop id) finishes it
  // at once and is returned.
  StatusOr<std::optional<FinishReason>> Extend(RequestId id, TokenId token);

  // The live (not finished) request, or null.
  const Request* Find(RequestId id) const;
  bool has_unfinished_requests() const { return !requests_.empty(); }
  SchedulerStats Stats() const;

  // The cache's invariants plus the scheduler's own: running requests hold blocks for their
  // computed tokens, waiting ones hold none and computed none, counts agree. Checked after
  // every step in debug builds; O(blocks x block_size).
  Status CheckInvariants() const;

 private:
  struct StepPlan {
    Request* request;
    int num_verified_tokens;  // rows that compute verified tokens
    int num_draft_tokens;     // rows that verify drafts
    bool first_scheduled;
    std::vector<BlockId> new_block_ids;
  };
  struct ScheduledLogits {
    int num_draft_tokens;
    int num_logits;
  };

  KvCacheRequest KvView(const Request& request) const;
  void EvictIfOverWindow(Request& request);
  // Tokens one step may compute of `request` (beside the budget): the pool's bound, and
  // kMaxPromptLogprobsTokensPerStep with prompt_logprobs.
  int StepTokenLimit(const Request& request) const;
  // Serves running requests; returns whether any was preempted.
  bool ScheduleRunning(std::vector<StepPlan>& plans, int& budget, SchedulerOutput& out);
  void AdmitWaiting(std::vector<StepPlan>& plans, int& budget, SchedulerOutput& out);
  // Whether `waiting` should wait for a running request of its cache salt that is about to
  // compute the next full block of its prompt (the first it finds uncached): a step later
  // that block is cached and it computes only what is its own, so users arriving together
  // behind a new system prompt compute the prompt once instead of once each.
  bool WaitsForSharedPrefill(const Request& waiting) const;
  bool QueueIsFullFor(std::string_view tenant) const;
  bool PreemptsBefore(const Request& a, const Request& b) const;
  Request* PickVictim() const;
  // A running request parked with all its tokens computed (beam search: waiting for its
  // siblings), of no higher priority than `waiting`, that may give it its seat and blocks
  // (it recomputes later): parked beams must not hold the pool from the sibling they wait
  // for. Null when none.
  Request* ParkedVictim(const Request& waiting) const;
  // A running request of another tenant, above its share, that `waiting` may take the seat
  // and blocks of; null when none (the waiting request then waits its turn).
  Request* FairShareVictim(const Request& waiting) const;
  void Preempt(Request* victim, std::vector<StepPlan>& plans, int& budget,
               SchedulerOutput& out);
  ScheduledRequest Commit(StepPlan& plan);
  // Appends one token and checks the stop conditions.
  std::optional<FinishReason> AppendToken(Request& request, TokenId token);
  void Finish(Request* request, FinishReason reason);
  void DebugCheckInvariants() const;

  SchedulerConfig config_;
  KvCacheManager& kv_;
  int max_model_len_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;  // live ones
  std::vector<Request*> running_;  // admission order
  TenantCounts running_per_tenant_;  // running_, by tenant
  WaitingQueue waiting_;
  uint64_t next_arrival_order_ = 0;
  std::vector<RequestId> finished_since_schedule_;
  std::vector<BlockCopy> block_copies_;  // Fork's, until a step runs
  std::unordered_map<RequestId, ScheduledLogits> last_step_;
  // The embeddings whose prompt's last token the step in flight computes: Update ends them.
  std::vector<RequestId> embedded_;
  SchedulerStats stats_;
};

}  // namespace tokenmill
