// The engine's single-threaded core: scheduler, KV cache manager, model runner, sampler and
// the per-request output streams. Engine runs it on its thread; tests may drive it step by
// step. Not thread-safe: one thread calls everything.
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <unordered_map>

#include "cache/kv_cache_manager.h"
#include "common/status.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine/model_runner.h"
#include "engine/request_output.h"
#include "engine/request_validation.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "model/tokenizer/tokenizer.h"
#include "scheduler/scheduler.h"

namespace tokenmill {

class EngineCore {
 public:
  using Clock = std::chrono::steady_clock;

  // `model` and `tokenizer` must outlive the core.
  static StatusOr<std::unique_ptr<EngineCore>> Create(const Model& model,
                                                      const Tokenizer& tokenizer,
                                                      const EngineConfig& config);

  const RequestLimits& limits() const { return limits_; }

  // Queues a request under `id` (unique). Validates it first; on error the sink is not
  // called. A request without a seed gets a random one here.
  Status Add(RequestId id, GenerateRequest request, Clock::time_point submit_time = Clock::now());

  // Frees the request's blocks now and emits its abort event; false for an unknown id.
  bool Abort(RequestId id);
  void AbortAll();

  // One iteration: schedule, run the forward pass, sample, update, emit. Returns false when
  // nothing could run (idle, or waiting requests that do not fit yet).
  bool Step();

  bool has_unfinished_requests() const { return !outputs_.empty(); }
  EngineStats Stats() const;
  const KvCacheManager& kv_cache() const { return *kv_; }
  const Scheduler& scheduler() const { return *scheduler_; }

 private:
  EngineCore(const Tokenizer& tokenizer, std::unique_ptr<KvCacheManager> kv,
             std::unique_ptr<Scheduler> scheduler, std::unique_ptr<ModelRunner> runner,
             RequestLimits limits);
  void FailStep(const SchedulerOutput& step, const Status& error);

  const Tokenizer& tokenizer_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  Sampler sampler_;
  StepLogprobs step_logprobs_;  // the last step's, reused
  std::mt19937_64 seed_source_;  // seeds for requests that bring none
  RequestLimits limits_;
  std::unordered_map<RequestId, RequestOutput> outputs_;  // live requests
  int64_t num_steps_ = 0;
};

}  // namespace tokenmill
