// The engine's single-threaded core: scheduler, KV cache manager, model runner, sampler and
// the per-request output streams. Engine runs it on its thread; tests may drive it step by
// step. Not thread-safe: one thread calls everything. BuildEngineCore
// (engine_core_builder.h) makes one from a model and a config.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/beam_search.h"
#include "engine/elastic_kv.h"
#include "common/status.h"
#include "engine/engine_stats.h"
#include "engine/generate_request.h"
#include "engine/grammar_constraints.h"
#include "engine/kv_tiering.h"
#include "engine/model_runner.h"
#include "engine/request_output.h"
#include "engine/request_validation.h"
#include "engine/sampling/sampler.h"
#include "engine/sequence_fan_out.h"
#include "engine/speculative/speculator.h"
#include "scheduler/scheduler.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

class EngineCore {
 public:
  using Clock = std::chrono::steady_clock;

  // `scheduler` runs over `kv`; `speculator` is null without speculative decoding, `tiering`
  // without a disk tier, `elastic_kv` unless kv's pools share a limit with other engines'.
  // `tokenizer` must outlive the core.
  EngineCore(const Tokenizer& tokenizer, std::unique_ptr<KvCacheManager> kv,
             std::unique_ptr<Scheduler> scheduler, std::unique_ptr<ModelRunner> runner,
             std::unique_ptr<Speculator> speculator, std::unique_ptr<KvTiering> tiering = nullptr,
             std::unique_ptr<ElasticKv> elastic_kv = nullptr);

  // What Add's requests are validated against.
  const RequestLimits& limits() const { return limits_; }

  // Queues a request under `id`; its n sequences take the ids id..id+n-1 (all unused) and
  // their events carry `id` and their index. On error (the queue refusing any of them) the
  // sink is not called and nothing is queued. A request without a seed gets a random one
  // here. Sequences 1..n-1 wait while sequence 0 computes the prompt's full blocks, which the
  // prefix cache then serves them (Scheduler::WaitsForSharedPrefill). With a disk tier, a
  // request whose prompt continues on disk past the pool's hit waits outside the scheduler
  // until those blocks are back in the pool (a later Step adds it, or ends it with an error
  // event when the queue refuses it then).
  Status Add(RequestId id, ValidatedRequest request, Clock::time_point submit_time = Clock::now());
  // Validates `request` against limits() (and requires its sink) first: for callers that
  // drive the core themselves.
  Status Add(RequestId id, GenerateRequest request, Clock::time_point submit_time = Clock::now());

  // Frees the request's blocks now and emits its abort event (for each of its sequences
  // when `id` is the id of a request with n > 1); false for an unknown id.
  bool Abort(RequestId id);
  void AbortAll();

  // One iteration: schedule, run the forward pass and sample, update, emit. Returns false
  // when nothing could run (idle, or waiting requests that do not fit yet). `on_scheduled`
  // runs once the step's batch is chosen and before any event is emitted: a sink's reader
  // may react to an event at once, and must then see the scheduler's queue as it is.
  bool Step(const std::function<void()>& on_scheduled = nullptr);

  bool has_unfinished_requests() const { return !outputs_.empty() || !loading_.empty(); }
  // Requests waiting outside the scheduler for their prefix blocks to load from disk (they
  // count against the queue's limit as the scheduler's waiting ones do).
  int num_loading() const { return num_loading_; }
  // With no request left: the scheduler's invariants hold and no KV block is in use (every
  // block free or cached). Counted in Stats(); a failure is logged at error level.
  Status CheckIdle();
  EngineStats Stats() const;
  const KvCacheManager& kv_cache() const { return *kv_; }
  // The prefix cache's events go to `log` from now on (KvCacheManager::set_event_log).
  void set_kv_event_log(std::vector<KvCacheEvent>* log) { kv_->set_event_log(log); }
  const Scheduler& scheduler() const { return *scheduler_; }
  const ModelRunner& runner() const { return *runner_; }
  // LoRA adapter `id` for the requests added from now on (an id never held before).
  Status AddLora(int id, std::shared_ptr<const LoraAdapter> adapter, std::string digest) {
    return runner_->AddLora(id, std::move(adapter), std::move(digest));
  }
  // Adapter `id` refuses new requests at once and is let go of once no request (running,
  // waiting or loading its prefix) has it: RetireLoras, after each step.
  void RemoveLora(int id) { retiring_loras_.push_back(id); }
  void RetireLoras();
  // The disk tier's engine side; null without one.
  KvTiering* tiering() { return tiering_.get(); }
  // The pools' share of a limit over several engines; null when they are fixed.
  ElasticKv* elastic_kv() { return elastic_kv_.get(); }

 private:
  using OutputMap = std::unordered_map<RequestId, RequestOutput>;

  // Step's phases. Schedule picks the batch and runs on_scheduled;
  // Execute runs the forward pass, samples and asks for the next drafts; Emit streams the
  // scheduler's events to their requests' outputs.
  SchedulerOutput Schedule(const std::function<void()>& on_scheduled);
  StatusOr<ModelOutput> Execute(const SchedulerOutput& step);
  void Emit(const std::vector<RequestEvent>& events);
  // Finishes (stop) the sequences whose grammar ended this step, unless Update did.
  void FinishEndedGrammars(std::vector<RequestEvent>& events);
  // Ends every request of a step that could not run with an error event.
  void FailStep(const SchedulerOutput& step, const Status& error);

  // A request whose prefix blocks load from a tier below the pool.
  struct Loading {
    RequestId id;
    ValidatedRequest request;
    Clock::time_point submit_time;
  };
  // Adds a request to the scheduler now (Add past the tier).
  Status AddNow(RequestId id, ValidatedRequest valid, Clock::time_point submit_time);
  // Adds the requests whose loads finished; one the queue refuses ends with an error event.
  void AddLoaded();
  // Adds a loading request now (its load dropped) so that the caller can abort it as any other.
  bool StopLoading(RequestId id);

  // Aborts one sequence.
  bool AbortSequence(RequestId id);
  // Drops a sequence's output and its group's count.
  void EraseOutput(OutputMap::iterator it);
  // Ends the beam search of request `id`: its beams leave the scheduler, its n outputs end
  // with `reason` (and `error`).
  void EndBeamSearch(RequestId id, CompletionReason reason, const Status& error);
  // Emits a finished search's hypotheses, best first, as sequences 0..n-1.
  void EmitBeamResult(const BeamSearchResult& result);

  const Tokenizer& tokenizer_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Speculator> speculator_;  // null without speculative decoding
  std::unique_ptr<KvTiering> tiering_;      // null without a disk tier
  std::unique_ptr<ElasticKv> elastic_kv_;   // null for fixed pools
  // By the load's ticket: the requests waiting for it (several when they share its blocks).
  std::unordered_map<uint64_t, std::vector<Loading>> loading_;
  int num_loading_ = 0;
  std::vector<int> retiring_loras_;  // RemoveLora's, until no request has them
  const RequestLimits limits_;
  Sampler sampler_;
  StepLogprobs step_logprobs_;  // the last step's, reused
  GrammarConstraints grammars_;  // the constrained sequences' matchers
  std::vector<RequestId> ended_grammars_;  // the last step's, reused
  std::mt19937_64 seed_source_;  // seeds for requests that bring none
  OutputMap outputs_;  // live sequences
  SequenceFanOut fan_out_;
  BeamSearch beams_;
  int64_t num_steps_ = 0;
  int64_t idle_checks_ = 0;
  int64_t idle_check_failures_ = 0;
};

}  // namespace tokenmill
