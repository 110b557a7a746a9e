// The continuous-batching engine (docs/design.md section 1): one engine thread owns the
// scheduler, the KV cache and the model runner and loops admit -> schedule -> execute ->
// sample -> update -> emit; it sleeps when there is nothing to do. Other threads only Submit,
// Abort, read Stats and Shutdown.
//
//   TM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
//                       Engine::Create(model, tokenizer, EngineConfig{}));
//   OutputStream stream;                      // or any OutputSink (e.g. a gRPC reactor's)
//   GenerateRequest request{.prompt_token_ids = ids, .sink = stream.Sink()};
//   TM_ASSIGN_OR_RETURN(RequestId id, engine->Submit(std::move(request)));
//   for (GenerateOutput out = stream.Next(); ; out = stream.Next()) { ...; if (out.finished) break; }
//
// Every accepted request gets exactly one final event (finished == true): stop, length,
// abort (Abort, or Shutdown past its drain time) or error.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/engine_config.h"
#include "engine/engine_stats.h"
#include "engine/generate_output.h"
#include "engine/generate_request.h"
#include "engine/output_stream.h"
#include "engine/request_validation.h"
#include "model/model.h"
#include "scheduler/request.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

class EngineCore;
class KvTiering;

class Engine {
 public:
  // Builds the KV pool, scheduler and runner and starts the engine thread. `model` and
  // `tokenizer` must outlive the engine. InvalidArgument when the config cannot work (the
  // message names the setting to change). `draft_model` (config.spec.method kDraft only)
  // drafts tokens for speculative decoding and must outlive the engine too.
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const Tokenizer& tokenizer,
                                                  const EngineConfig& config,
                                                  const Model* draft_model = nullptr);
  // Shutdown(0): requests still in flight get an abort event.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its id. Any thread. InvalidArgument for a bad request
  // (ValidateGenerateRequest: empty prompt, token id outside the vocabulary, prompt leaving
  // no room to generate in max_model_len, max_tokens < 1, a sampling parameter out of range,
  // n outside [1, 16], empty stop string, kv_window with --spec, ...) or one without a sink,
  // ResourceExhausted when the queue is full, Unavailable after Shutdown began. On error the
  // sink is never called. Validated here only: the engine thread trusts what it takes from
  // the inbox.
  StatusOr<RequestId> Submit(GenerateRequest request);
  // A request an edge validated against limits() (ValidatedRequest::Validate) while mapping
  // its wire, so that its refusal could name the wire's field: not checked again.
  StatusOr<RequestId> Submit(ValidatedRequest request);

  // Ends the request with an abort event within one step, freeing its KV blocks. Any
  // thread; a no-op for unknown or already finished ids.
  void Abort(RequestId id);

  // A snapshot; cheap, never waits for a step.
  EngineStats Stats() const;
  // Each prefix cached now, as its kBlockStored event: the state a subscriber of
  // config.kv_event_handler's events holds once it has applied every event handed out so
  // far. Any thread; waits for the engine thread's next iteration. Unavailable once the
  // engine has stopped.
  StatusOr<std::vector<KvCacheEvent>> CachedPrefixes();

  // Deletes the disk tier's blocks whose cache salt starts with salt_prefix (a tenant's),
  // waiting for it; returns how many went. FailedPrecondition without --kv-cache-dir. Any
  // thread.
  StatusOr<int64_t> PurgeKvTier(std::string_view salt_prefix);

  // LoRA adapter `id` (over the engine's model, an id never used before, as
  // EngineConfig::lora_adapters) for the requests submitted once this returns; the backend's
  // error when it cannot take it (ForwardBackend::AddLora), Unavailable once the engine has
  // stopped. Any thread; waits for the engine thread.
  Status AddLora(int id, std::shared_ptr<const LoraAdapter> adapter);
  // Adapter `id` refuses the requests that reach the engine from now on (NotFound); the
  // engine lets go of it once no request runs or waits with it. Any thread.
  void RemoveLora(int id);

  // Refuses new requests, lets those in flight run for up to `drain_timeout`, aborts the
  // rest (each gets its abort event) and joins the engine thread. Idempotent; any thread
  // but the engine's (so not from a sink).
  void Shutdown(std::chrono::milliseconds drain_timeout = std::chrono::milliseconds::max());

  // Prompt plus generated tokens a request may reach (the model's context, the configured
  // limit and the KV pool, whichever is least).
  int max_model_len() const { return limits_.max_model_len; }
  int vocab_size() const { return limits_.vocab_size; }
  // What Submit validates against. Any thread.
  const RequestLimits& limits() const { return limits_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Submitted {
    RequestId id;
    ValidatedRequest request;
    Clock::time_point submit_time;
  };
  // What other threads post; the engine thread takes it all at the top of each iteration.
  struct Inbox {
    std::vector<Submitted> submitted;
    std::vector<RequestId> aborted;
    std::vector<std::promise<std::vector<KvCacheEvent>>> prefix_dumps;
    struct AddedLora {
      int id;
      std::shared_ptr<const LoraAdapter> adapter;
      std::string digest;  // hashed on the caller's thread, not the engine's
      std::promise<Status> added;
    };
    std::vector<AddedLora> added_loras;
    std::vector<int> removed_loras;
    // A disk load finished or its contents changed, or another engine asks for KV memory or
    // gave some back (the shared KV limit).
    bool woken = false;
  };

  Engine(std::unique_ptr<EngineCore> core, int max_queue,
         std::function<void(std::vector<KvCacheEvent>)> kv_event_handler);
  void Loop();
  // Makes the loop run an iteration (from another thread).
  void Wake();
  // num_waiting_in_scheduler_ = the scheduler's queue (and the requests loading their prefix
  // from disk) now. Engine thread.
  void CountWaiting();
  // The disk tier's changes since the last call, as KV events (medium "DISK").
  void TakeTierEvents();
  void PublishStats();

  std::unique_ptr<EngineCore> core_;  // touched only by the engine thread
  // The core's disk tier (null: none), for its thread-safe calls from any thread.
  KvTiering* const tiering_;
  const RequestLimits limits_;        // the core's, read by Submit on any thread
  const int max_queue_;
  // With its events buffer, the engine thread's alone.
  const std::function<void(std::vector<KvCacheEvent>)> kv_event_handler_;
  std::vector<KvCacheEvent> kv_events_;
  std::atomic<RequestId> next_id_{1};

  mutable std::mutex inbox_mutex_;
  std::condition_variable inbox_cv_;
  Inbox inbox_;                     // guarded by inbox_mutex_
  // Requests waiting in the scheduler, never below the truth (Submit's queue limit).
  int num_waiting_in_scheduler_ = 0;  // guarded by inbox_mutex_
  bool shutting_down_ = false;      // guarded by inbox_mutex_
  bool stopped_ = false;            // the loop has ended; guarded by inbox_mutex_
  Clock::time_point drain_deadline_ = Clock::time_point::max();  // guarded by inbox_mutex_

  mutable std::mutex stats_mutex_;
  EngineStats stats_;  // guarded by stats_mutex_

  std::mutex shutdown_mutex_;  // serializes Shutdown callers
  std::thread thread_;
};

}  // namespace tokenmill
