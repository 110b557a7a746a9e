// Drives a Scheduler with the FakeRunner the way the engine loop will: Schedule, Execute,
// Update. Records what each step batched and each request's streamed tokens and end state,
// and checks the scheduler's invariants after every call.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "scheduler/scheduler.h"
#include "tests/scheduler/fake_runner.h"

namespace tokenmill::testing {

// Proposes draft tokens for a request whose verified tokens are `tokens`.
using Drafter = std::function<std::vector<TokenId>(RequestId id, std::span<const TokenId> tokens)>;

// A request with a prompt of `prompt_length` tokens unique to `id`.
NewRequest MakeRequest(RequestId id, int prompt_length, int max_tokens, int priority = 0);
NewRequest MakeRequest(RequestId id, std::vector<TokenId> prompt, int max_tokens,
                       int priority = 0);

KvCacheConfig MakeCacheConfig(int num_blocks, int block_size, int watermark_blocks = 0);

class SchedulerSim {
 public:
  SchedulerSim(const SchedulerConfig& config, const KvCacheConfig& cache_config);

  Status Add(NewRequest request);
  Status Abort(RequestId id);
  void set_drafter(Drafter drafter) { drafter_ = std::move(drafter); }

  // One engine step. Returns the batch as "id:tokens" in batch order, e.g. "1:1 2:7", with
  // draft rows as "id:verified+drafts", e.g. "1:1+2"; "" when nothing ran.
  std::string Step();
  // Every request ever added, by id: W waiting, R running, P preempted, or its end:
  // stop, len, abort. E.g. "1:R 2:W 3:len".
  std::string States() const;
  // Steps until no request is live; false if that takes more than max_steps.
  bool RunToCompletion(int max_steps);

  const SchedulerOutput& last_output() const { return last_output_; }
  const std::vector<RequestEvent>& last_events() const { return last_events_; }
  const std::vector<TokenId>& streamed(RequestId id) { return streamed_[id]; }
  const std::vector<TokenId>& prompt(RequestId id) { return prompts_[id]; }
  // Checks that each request's streamed tokens are the reference continuation of its prompt.
  void ExpectReferenceOutputs() const;

  Scheduler& scheduler() { return scheduler_; }
  KvCacheManager& kv_cache() { return kv_cache_; }

 private:
  void ExpectInvariants(const char* when);
  // Running requests are served in order until the budget runs out: a request left out or
  // cut short means the whole budget went to the batch.
  void ExpectBudgetUsedBeforeCutting();

  SchedulerConfig config_;
  KvCacheManager kv_cache_;
  Scheduler scheduler_;
  FakeRunner runner_;
  Drafter drafter_;
  SchedulerOutput last_output_;
  std::vector<RequestEvent> last_events_;
  std::map<RequestId, std::vector<TokenId>> prompts_;
  std::map<RequestId, std::vector<TokenId>> streamed_;
  std::map<RequestId, std::string> ended_;  // end state of finished requests
};

}  // namespace tokenmill::testing
