#include "engine/engine.h"

#include <algorithm>
#include <string>

#include "common/check.h"
#include "engine/engine_core.h"
#include "engine/engine_core_builder.h"
#include "engine/kv_tiering.h"

namespace tokenmill {

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const Tokenizer& tokenizer,
                                                 const EngineConfig& config,
                                                 const Model* draft_model) {
  TM_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core,
                      BuildEngineCore(model, tokenizer, config, draft_model));
  std::unique_ptr<Engine> engine(
      new Engine(std::move(core), config.scheduler.max_queue, config.kv_event_handler));
  engine->PublishStats();
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(std::unique_ptr<EngineCore> core, int max_queue,
               std::function<void(std::vector<KvCacheEvent>)> kv_event_handler)
    : core_(std::move(core)),
      tiering_(core_->tiering()),
      limits_(core_->limits()),
      max_queue_(max_queue),
      kv_event_handler_(std::move(kv_event_handler)) {
  if (kv_event_handler_) core_->set_kv_event_log(&kv_events_);
  if (tiering_ != nullptr) tiering_->SetWake([this] { Wake(); });
  if (ElasticKv* elastic = core_->elastic_kv(); elastic != nullptr) {
    elastic->set_wake([this] { Wake(); });
  }
}

Engine::~Engine() {
  Shutdown(std::chrono::milliseconds(0));
  // The loader thread and the other engines must not wake an engine that is gone.
  if (tiering_ != nullptr) tiering_->SetWake(nullptr);
  if (ElasticKv* elastic = core_->elastic_kv(); elastic != nullptr) elastic->set_wake(nullptr);
}

void Engine::Wake() {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.woken = true;
  }
  inbox_cv_.notify_one();
}

StatusOr<int64_t> Engine::PurgeKvTier(std::string_view salt_prefix) {
  if (tiering_ == nullptr) {
    return FailedPreconditionError(
        "this server keeps no KV below its pool (no --kv-cache-dir or --kv-cache-host-size)");
  }
  return tiering_->Purge(salt_prefix);
}

StatusOr<RequestId> Engine::Submit(GenerateRequest request) {
  TM_ASSIGN_OR_RETURN(ValidatedRequest valid,
                      ValidatedRequest::Validate(std::move(request), limits_));
  return Submit(std::move(valid));
}

StatusOr<RequestId> Engine::Submit(ValidatedRequest valid) {
  TM_RETURN_IF_ERROR(RequireSink(valid.get()));
  // Its n sequences take the ids id..id+n-1 in the core.
  const RequestId id = next_id_.fetch_add(static_cast<RequestId>(valid.get().n));
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    if (shutting_down_) {
      return UnavailableError("the engine is shutting down: send the request to another server");
    }
    const int queued = num_waiting_in_scheduler_ + static_cast<int>(inbox_.submitted.size());
    if (queued >= max_queue_) {
      return ResourceExhaustedError(std::to_string(queued) +
                                    " requests are already waiting: retry later");
    }
    inbox_.submitted.push_back(Submitted{id, std::move(valid), Clock::now()});
  }
  inbox_cv_.notify_one();
  return id;
}

void Engine::Abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.aborted.push_back(id);
  }
  inbox_cv_.notify_one();
}

StatusOr<std::vector<KvCacheEvent>> Engine::CachedPrefixes() {
  std::future<std::vector<KvCacheEvent>> dump;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    if (stopped_) return UnavailableError("the engine has stopped");
    inbox_.prefix_dumps.emplace_back();
    dump = inbox_.prefix_dumps.back().get_future();
  }
  inbox_cv_.notify_one();
  return dump.get();
}

Status Engine::AddLora(int id, std::shared_ptr<const LoraAdapter> adapter) {
  std::string digest = ModelTensorDigest(adapter->file());
  std::future<Status> added;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    if (stopped_ || shutting_down_) return UnavailableError("the engine is shutting down");
    inbox_.added_loras.push_back({id, std::move(adapter), std::move(digest), {}});
    added = inbox_.added_loras.back().added.get_future();
  }
  inbox_cv_.notify_one();
  return added.get();
}

void Engine::RemoveLora(int id) {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.removed_loras.push_back(id);
  }
  inbox_cv_.notify_one();
}

EngineStats Engine::Stats() const {
  EngineStats stats;
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats = stats_;
  }
  // The disk tier's threads change its figures between steps (writes land, purges): now's.
  if (tiering_ != nullptr) {
    stats.disk_tier = tiering_->DiskStats();
    stats.host_tier = tiering_->HostStats();
  }
  return stats;
}

void Engine::Shutdown(std::chrono::milliseconds drain_timeout) {
  TM_CHECK(std::this_thread::get_id() != thread_.get_id())
      << "Shutdown called on the engine thread (from an output sink?): it would join itself";
  std::lock_guard<std::mutex> serialize(shutdown_mutex_);
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    const Clock::time_point now = Clock::now();
    // Saturate: "forever" must not overflow the clock.
    const Clock::time_point deadline =
        drain_timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(
                             Clock::time_point::max() - now)
            ? Clock::time_point::max()
            : now + drain_timeout;
    drain_deadline_ = std::min(drain_deadline_, deadline);
    shutting_down_ = true;
  }
  inbox_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::Loop() {
  Clock::time_point flush_deadline;
  bool idle = false;  // the last step could run nothing
  bool idle_checked = true;  // CheckIdle ran since the last request left
  while (true) {
    Inbox inbox;
    bool abort_all = false;
    {
      std::unique_lock<std::mutex> lock(inbox_mutex_);
      // Sleep while nothing can change: no news, and no request that could run.
      inbox_cv_.wait_until(lock, shutting_down_ ? drain_deadline_ : Clock::time_point::max(),
                           [&] {
                             return !inbox_.submitted.empty() || !inbox_.aborted.empty() ||
                                    !inbox_.prefix_dumps.empty() || inbox_.woken ||
                                    !inbox_.added_loras.empty() ||
                                    !inbox_.removed_loras.empty() ||
                                    (shutting_down_ && !core_->has_unfinished_requests()) ||
                                    (!idle && core_->has_unfinished_requests());
                           });
      std::swap(inbox, inbox_);
      // Counted as waiting until the Adds below tell the truth.
      num_waiting_in_scheduler_ += static_cast<int>(inbox.submitted.size());
      abort_all = shutting_down_ && Clock::now() >= drain_deadline_;
    }
    // Every event of the iterations before this one has gone to the handler.
    for (auto& dump : inbox.prefix_dumps) {
      dump.set_value(core_->kv_cache().pool().CachedPrefixes());
    }
    // Before the requests: one submitted after AddLora returned finds its adapter.
    for (auto& lora : inbox.added_loras) {
      lora.added.set_value(
          core_->AddLora(lora.id, std::move(lora.adapter), std::move(lora.digest)));
    }
    for (const int id : inbox.removed_loras) core_->RemoveLora(id);
    for (Submitted& s : inbox.submitted) {
      OutputSink sink = s.request.get().sink;
      const Status status = core_->Add(s.id, std::move(s.request), s.submit_time);
      // Accepted by Submit, refused by the scheduler (a full queue): a final error event.
      if (!status.ok()) sink(GenerateOutput::Refused(s.id, status));
    }
    CountWaiting();
    for (const RequestId id : inbox.aborted) core_->Abort(id);
    if (abort_all) core_->AbortAll();
    // Counted again once the step has admitted (or preempted) requests, before its events
    // reach their clients: a client that answers its first token with a new request must
    // find the request it saw start no longer counted as waiting (test_server_errors.py's
    // full-queue test failed under load when the count was only refreshed after the step).
    const bool ran = core_->has_unfinished_requests() && core_->Step([this] { CountWaiting(); });
    idle = !ran;
    core_->RetireLoras();
    if (core_->has_unfinished_requests()) {
      idle_checked = false;
    } else if (!idle_checked) {
      idle_checked = true;
      (void)core_->CheckIdle();  // counted and logged by the core
    }
    // After the tier has copied this step's new blocks: a block given back loses its bytes.
    if (ElasticKv* elastic = core_->elastic_kv(); elastic != nullptr) elastic->GiveBack();
    PublishStats();
    TakeTierEvents();
    if (!kv_events_.empty()) {
      kv_event_handler_(std::move(kv_events_));
      kv_events_.clear();  // valid but unspecified after the move
    }
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    num_waiting_in_scheduler_ = core_->scheduler().Stats().num_waiting + core_->num_loading();
    if (shutting_down_ && !core_->has_unfinished_requests() && inbox_.submitted.empty()) {
      stopped_ = true;
      flush_deadline = drain_deadline_;
      for (auto& dump : inbox_.prefix_dumps) {
        dump.set_value(core_->kv_cache().pool().CachedPrefixes());
      }
      // No request can use them any more.
      for (auto& lora : inbox_.added_loras) {
        lora.added.set_value(UnavailableError("the engine is shutting down"));
      }
      break;
    }
  }
  // What the disk tier has queued goes to disk within the drain time: a restarted server
  // finds it.
  if (tiering_ != nullptr) tiering_->Flush(flush_deadline);
  // The pool goes with the engine (its model unloaded, the server stopping): a subscriber
  // drops what it held of it.
  if (kv_event_handler_) kv_event_handler_({KvCacheEvent::AllCleared()});
}

void Engine::TakeTierEvents() {
  if (tiering_ == nullptr) return;
  // Taken even without a subscriber, so that they never pile up.
  std::vector<KvTierChange> changes = tiering_->TakeEvents();
  if (!kv_event_handler_) return;
  for (KvTierChange& change : changes) {
    KvTierEvent& tier_event = change.event;
    KvCacheEvent event =
        tier_event.stored ? KvCacheEvent{} : KvCacheEvent::Removed(tier_event.hash);
    event.hash = tier_event.hash;
    event.parent_hash = tier_event.parent_hash;
    event.tokens = std::move(tier_event.tokens);
    event.medium = change.medium;
    kv_events_.push_back(std::move(event));
  }
}

void Engine::CountWaiting() {
  const int waiting = core_->scheduler().Stats().num_waiting + core_->num_loading();
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  num_waiting_in_scheduler_ = waiting;
}

void Engine::PublishStats() {
  EngineStats stats = core_->Stats();
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    stats.num_waiting += static_cast<int>(inbox_.submitted.size());
  }
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = stats;
}

}  // namespace tokenmill
