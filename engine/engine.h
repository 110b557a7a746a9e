// The continuous-batching engine (DESIGN.md section 1): one engine thread owns the scheduler,
// the KV cache and the model runner and loops admit -> schedule -> execute -> sample ->
// update -> emit; it sleeps when there is nothing to do. Other threads only Submit, Abort,
// read Stats and Shutdown.
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
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/engine_config.h"
#include "engine/generate_output.h"
#include "engine/output_stream.h"
#include "model/model.h"
#include "scheduler/request.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

class EngineCore;

struct GenerateRequest {
  std::vector<TokenId> prompt_token_ids;
  // Stop conditions and the sampler's parameters (scheduler/request.h). An unset seed is
  // drawn at random when the engine adds the request.
  SamplingParams sampling;
  // Sequences to generate from the prompt; sequence i draws with sampling.sequence_index + i
  // (so a seed gives reproducible, distinct sequences). They share the prompt's KV
  // blocks. Every event carries its sequence's index; each sequence ends with its own final
  // event. The request takes the ids id..id+n-1 in the engine.
  int n = 1;
  // Finish (stop) when the generated text contains one of these; the text streamed stops
  // right before it, even when it spans several tokens. Each must be non-empty.
  std::vector<std::string> stop_strings;
  // Smaller runs first (0 by default); ties go to the earlier arrival.
  int priority = 0;
  // Keeps tenants apart in the prefix cache.
  std::string cache_salt;
  // Set: generate past the context length, keeping sink and recent tokens' K/V
  // (scheduler/request.h); usage.evicted_tokens counts the tokens dropped.
  std::optional<KvWindow> kv_window;
  // Receives every event of this request, on the engine thread; must not block (see
  // generate_output.h). Required.
  OutputSink sink;
};

// Counters for metrics, published after every step; the int64 ones only grow.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;  // queued in the scheduler (preempted ones included) or in the inbox
  double kv_usage = 0.0;  // fraction of KV blocks in use
  int num_kv_blocks = 0;
  int num_kv_blocks_in_use = 0;
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;    // of those, found there
  int64_t num_preemptions = 0;
  int64_t num_prompt_tokens = 0;      // prompt tokens computed (prefix hits excluded)
  int64_t num_generation_tokens = 0;  // tokens generated
  int64_t num_finished = 0;
  int64_t num_steps = 0;  // forward passes run
  // Speculative decoding: verifications, draft tokens verified, of those accepted.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  // Self-checks run each time the engine falls idle (no request left): the scheduler's and
  // KV cache's invariants hold and every KV block is free or cached. A failure is logged.
  int64_t idle_checks = 0;
  int64_t idle_check_failures = 0;
};

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
  // (empty prompt, token id outside the vocabulary, prompt leaving no room to generate in
  // max_model_len, max_tokens < 1, a sampling parameter out of range, n outside [1, 16],
  // empty stop string, no sink), ResourceExhausted when the
  // queue is full, Unavailable after Shutdown began. On error the sink is never called.
  StatusOr<RequestId> Submit(GenerateRequest request);

  // Ends the request with an abort event within one step, freeing its KV blocks. Any
  // thread; a no-op for unknown or already finished ids.
  void Abort(RequestId id);

  // A snapshot; cheap, never waits for a step.
  EngineStats Stats() const;

  // Refuses new requests, lets those in flight run for up to `drain_timeout`, aborts the
  // rest (each gets its abort event) and joins the engine thread. Idempotent; any thread
  // but the engine's (so not from a sink).
  void Shutdown(std::chrono::milliseconds drain_timeout = std::chrono::milliseconds::max());

  // Prompt plus generated tokens a request may reach (the model's context, the configured
  // limit and the KV pool, whichever is least).
  int max_model_len() const { return max_model_len_; }
  int vocab_size() const { return vocab_size_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Submitted {
    RequestId id;
    GenerateRequest request;
    Clock::time_point submit_time;
  };
  // What other threads post; the engine thread takes it all at the top of each iteration.
  struct Inbox {
    std::vector<Submitted> submitted;
    std::vector<RequestId> aborted;
  };

  Engine(std::unique_ptr<EngineCore> core, int max_model_len, int vocab_size, int max_queue);
  void Loop();
  // num_waiting_in_scheduler_ = the scheduler's queue now. Engine thread.
  void CountWaiting();
  void PublishStats();

  std::unique_ptr<EngineCore> core_;  // touched only by the engine thread
  const int max_model_len_;
  const int vocab_size_;
  const int max_queue_;
  std::atomic<RequestId> next_id_{1};

  mutable std::mutex inbox_mutex_;
  std::condition_variable inbox_cv_;
  Inbox inbox_;                     // guarded by inbox_mutex_
  // Requests waiting in the scheduler, never below the truth (Submit's queue limit).
  int num_waiting_in_scheduler_ = 0;  // guarded by inbox_mutex_
  bool shutting_down_ = false;      // guarded by inbox_mutex_
  Clock::time_point drain_deadline_ = Clock::time_point::max();  // guarded by inbox_mutex_

  mutable std::mutex stats_mutex_;
  EngineStats stats_;  // guarded by stats_mutex_

  std::mutex shutdown_mutex_;  // serializes Shutdown callers
  std::thread thread_;
};

}  // namespace tokenmill
