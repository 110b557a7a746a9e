// The models one server serves (--model NAME=PATH, --models-dir): each loaded on first use,
// and unloaded, least recently used first, when another needs its memory (--model-memory) or
// after --model-idle-timeout without a request. One engine loop per model (docs/design.md says
// why).
//
// A call holds its model with a ModelLease while it runs; a model is unloaded only when no
// lease is left. Once a model is chosen to make room, no new lease is granted on it: its new
// calls wait their turn like any other, so a busy model cannot starve one that waits. Loads and
// unloads run on the registry's own thread, one at a time, never on gRPC's threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/grpc/serving_model.h"

namespace tokenmill::server {

// Keeps a model loaded for as long as it lives.
using ModelLease = std::shared_ptr<const ServingModel>;

// What the registry knows of a model before loading it.
struct RegisteredModel {
  std::vector<std::string> names;  // every name it is called by; the first is its id
  // Names that reach this model with something of its own: its LoRA adapters, as they come
  // and go (null: none). The model's ServingModel::loras when loaded.
  std::shared_ptr<const LoraTable> adapters;
  // What --model-memory counts for it: its files, and its KV pool unless the models share one
  // KV limit (ModelLimits::shared_kv_bytes).
  int64_t footprint_bytes = 0;
};

struct ModelLimits {
  int64_t memory_bytes = 0;                    // 0: no limit
  int64_t shared_kv_bytes = 0;  // the KV limit the models' pools share: counted once
  std::chrono::milliseconds idle_timeout{0};   // 0: never unloaded for idleness alone
  std::chrono::milliseconds load_timeout{120'000};  // a call's wait for its model
  // Calls waiting for loads at once, all models together (--max-queue): more are refused
  // with RESOURCE_EXHAUSTED, as a full engine queue refuses them.
  size_t max_waiting = 1024;
};

// What the metrics say of one model.
struct ModelState {
  std::string name;
  bool loaded = false;
  int64_t loads = 0;
  int64_t unloads = 0;
};

class ModelRegistry {
 public:
  // Loads model `index`: what LoadServingModel does with that model's options.
  using Loader = std::function<StatusOr<std::unique_ptr<ServingModel>>(int index)>;
  using Granted = std::function<void(StatusOr<ModelLease>)>;

  // Model 0 is the default: the one a call without a model name gets.
  ModelRegistry(std::vector<RegisteredModel> models, ModelLimits limits, Loader loader);
  ~ModelRegistry();  // Shutdown(0) if not done, then every model unloaded
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // Loads the default model on this thread (at startup), then starts the registry's thread.
  Status Start();

  // The model `name` calls for: empty is the default; an adapter's name is its model (with
  // `adapter` set). NotFound names what GET /v1/models would list.
  struct Resolved {
    int index = 0;
    bool adapter = false;
  };
  StatusOr<Resolved> Resolve(std::string_view name) const;

  // A lease on model `index` now, or null when it is not loaded or is making room.
  ModelLease TryAcquire(int index);
  // A lease on model `index` if it is loaded, which does not count as its use (for the
  // metrics and the admin pages): null when it is not.
  ModelLease Peek(int index);
  // `granted` gets a lease once model `index` is loaded: at once (on this thread) when it is,
  // else on the registry's thread; or an error: the load's, or UNAVAILABLE after the load
  // timeout or at shutdown; RESOURCE_EXHAUSTED when ModelLimits::max_waiting calls wait.
  void Acquire(int index, Granted granted);

  // Grants nothing more (waiting calls get UNAVAILABLE) and drains every loaded engine within
  // `drain`: requests still running then are aborted.
  void Shutdown(std::chrono::milliseconds drain);

  std::vector<ModelState> States() const;
  // Every model's id, the default first.
  std::vector<std::string> Ids() const;
  size_t size() const { return models_.size(); }

 private:
  enum class Phase { kUnloaded, kLoading, kLoaded, kClosing, kUnloading, kFailed };
  struct Waiter {
    Granted granted;
    std::chrono::steady_clock::time_point since;
  };
  struct Slot {
    RegisteredModel model;
    Phase phase = Phase::kUnloaded;
    std::unique_ptr<ServingModel> serving;
    int leases = 0;
    std::chrono::steady_clock::time_point last_used;
    std::vector<Waiter> waiters;
    Status failure;
    int64_t loads = 0;
    int64_t unloads = 0;
  };
  // What the thread does next, decided under the lock.
  struct Job {
    enum Kind { kNone, kLoad, kUnload } kind = kNone;
    int index = -1;
  };
  using Grants = std::vector<std::pair<Granted, StatusOr<ModelLease>>>;

  void Loop();
  // Expired waiters out (into `grants`), idle models to close, then the next load or unload.
  // mutex_ held.
  Job Plan(std::chrono::steady_clock::time_point now, Grants& grants);
  // Marks loaded models closing, least recently used first, until `index` would fit.
  void MakeRoomFor(int index);
  int64_t ResidentBytes() const;  // mutex_ held
  // mutex_ held; the slot is loaded. `use`: the lease's start and end count as the model's use
  // (its place in the LRU order and its idle time).
  ModelLease LeaseOf(int index, bool use = true);
  void Release(int index, bool use);
  // The earliest time Plan has something to do without a notify. mutex_ held.
  std::chrono::steady_clock::time_point NextDeadline() const;
  static void Deliver(Grants& grants);

  const ModelLimits limits_;
  const Loader loader_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Slot> models_;
  size_t waiting_ = 0;  // waiters of every slot
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tokenmill::server
