#include "server/grpc/model_registry.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>

#include "common/byte_size.h"

namespace tokenmill::server {
namespace {

using Clock = std::chrono::steady_clock;

// How much of a name an error echoes: names come from clients.
constexpr size_t kEchoedNameChars = 128;

double SecondsOf(std::chrono::milliseconds duration) { return duration.count() / 1000.0; }

}  // namespace

ModelRegistry::ModelRegistry(std::vector<RegisteredModel> models, ModelLimits limits,
                             Loader loader)
    : limits_(limits), loader_(std::move(loader)) {
  models_.reserve(models.size());
  for (RegisteredModel& model : models) {
    Slot slot;
    slot.model = std::move(model);
    models_.push_back(std::move(slot));
  }
}

ModelRegistry::~ModelRegistry() {
  Shutdown(std::chrono::milliseconds(0));
  // Every lease is gone by now (the server's calls ended): the models go with the slots.
}

Status ModelRegistry::Start() {
  StatusOr<std::unique_ptr<ServingModel>> loaded = loader_(0);
  if (!loaded.ok()) return loaded.status();
  {
    std::lock_guard lock(mutex_);
    Slot& slot = models_.front();
    slot.serving = std::move(*loaded);
    slot.phase = Phase::kLoaded;
    slot.loads = 1;
    slot.last_used = Clock::now();
  }
  thread_ = std::thread([this] { Loop(); });
  return OkStatus();
}

StatusOr<ModelRegistry::Resolved> ModelRegistry::Resolve(std::string_view name) const {
  if (name.empty()) return Resolved{};
  for (size_t i = 0; i < models_.size(); ++i) {
    const std::vector<std::string>& names = models_[i].model.names;
    if (std::ranges::find(names, name) != names.end()) return Resolved{static_cast<int>(i)};
  }
  for (size_t i = 0; i < models_.size(); ++i) {
    const LoraTable* adapters = models_[i].model.adapters.get();
    if (adapters != nullptr && adapters->IdOf(name).has_value()) {
      return Resolved{static_cast<int>(i), true};
    }
  }
  std::vector<std::string> served;
  for (const Slot& slot : models_) served.push_back("'" + slot.model.names.front() + "'");
  for (const Slot& slot : models_) {
    if (slot.model.adapters == nullptr) continue;
    for (const std::string& adapter : slot.model.adapters->Names()) {
      served.push_back("'" + adapter + "'");
    }
  }
  return NotFoundError(fmt::format("no model or LoRA adapter is called '{}{}': this server "
                                   "serves {}",
                                   name.substr(0, kEchoedNameChars),
                                   name.size() > kEchoedNameChars ? "..." : "",
                                   fmt::join(served, ", ")));
}

ModelLease ModelRegistry::LeaseOf(int index, bool use) {
  Slot& slot = models_[index];
  ++slot.leases;
  if (use) slot.last_used = Clock::now();
  return ModelLease(slot.serving.get(),
                    [this, index, use](const ServingModel*) { Release(index, use); });
}

void ModelRegistry::Release(int index, bool use) {
  std::lock_guard lock(mutex_);
  Slot& slot = models_[index];
  --slot.leases;
  if (use) slot.last_used = Clock::now();
  // The thread unloads a closing model, or times an idle one, from its last lease on.
  if (slot.leases == 0) wake_.notify_one();
}

ModelLease ModelRegistry::TryAcquire(int index) {
  std::lock_guard lock(mutex_);
  if (stopping_ || models_[index].phase != Phase::kLoaded) return nullptr;
  return LeaseOf(index);
}

ModelLease ModelRegistry::Peek(int index) {
  std::lock_guard lock(mutex_);
  const Phase phase = models_[index].phase;
  if (phase != Phase::kLoaded && phase != Phase::kClosing) return nullptr;
  return LeaseOf(index, /*use=*/false);
}

void ModelRegistry::Acquire(int index, Granted granted) {
  StatusOr<ModelLease> now = UnavailableError("the server is shutting down: send the request "
                                              "to another server");
  {
    std::lock_guard lock(mutex_);
    Slot& slot = models_[index];
    if (!stopping_) {
      if (slot.phase == Phase::kLoaded) {
        now = LeaseOf(index);
      } else if (slot.phase == Phase::kFailed) {
        now = slot.failure;
      } else if (waiting_ >= limits_.max_waiting) {
        now = ResourceExhaustedError(fmt::format(
            "{} requests already wait for models to load (--max-queue): retry later", waiting_));
      } else {
        ++waiting_;
        slot.waiters.push_back(Waiter{std::move(granted), Clock::now()});
        wake_.notify_one();
        return;
      }
    }
  }
  granted(std::move(now));
}

int64_t ModelRegistry::ResidentBytes() const {
  int64_t bytes = limits_.shared_kv_bytes;
  for (const Slot& slot : models_) {
    if (slot.phase != Phase::kUnloaded && slot.phase != Phase::kFailed) {
      bytes += slot.model.footprint_bytes;
    }
  }
  return bytes;
}

void ModelRegistry::MakeRoomFor(int index) {
  int64_t leaving = 0;
  for (const Slot& slot : models_) {
    if (slot.phase == Phase::kClosing || slot.phase == Phase::kUnloading) {
      leaving += slot.model.footprint_bytes;
    }
  }
  int64_t excess =
      ResidentBytes() - leaving + models_[index].model.footprint_bytes - limits_.memory_bytes;
  std::vector<int> loaded;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].phase == Phase::kLoaded) loaded.push_back(static_cast<int>(i));
  }
  std::ranges::sort(loaded, {}, [this](int i) { return models_[i].last_used; });
  for (const int victim : loaded) {
    if (excess <= 0) break;
    models_[victim].phase = Phase::kClosing;
    excess -= models_[victim].model.footprint_bytes;
    spdlog::info("model {} unloads once its {} requests end, to make room for {}",
                 models_[victim].model.names.front(), models_[victim].leases,
                 models_[index].model.names.front());
  }
}

ModelRegistry::Job ModelRegistry::Plan(Clock::time_point now, Grants& grants) {
  for (Slot& slot : models_) {
    auto expired = std::ranges::partition(slot.waiters, [&](const Waiter& waiter) {
      return now - waiter.since < limits_.load_timeout;
    });
    for (Waiter& waiter : expired) {
      grants.emplace_back(
          std::move(waiter.granted),
          UnavailableError(fmt::format(
              "model {} was not loaded within --model-load-timeout ({} s): the other models' "
              "requests hold the memory it needs (--model-memory); retry later",
              slot.model.names.front(), SecondsOf(limits_.load_timeout))));
    }
    waiting_ -= static_cast<size_t>(std::ranges::distance(expired));
    slot.waiters.erase(expired.begin(), expired.end());
  }
  for (size_t i = 0; i < models_.size(); ++i) {
    const Slot& slot = models_[i];
    const bool idle = slot.phase == Phase::kLoaded && slot.leases == 0 &&
                      limits_.idle_timeout.count() > 0 &&
                      now - slot.last_used >= limits_.idle_timeout;
    if ((slot.phase == Phase::kClosing && slot.leases == 0) || idle) {
      return Job{Job::kUnload, static_cast<int>(i)};
    }
  }
  int next = -1;  // the unloaded model waited for longest
  for (size_t i = 0; i < models_.size(); ++i) {
    const Slot& slot = models_[i];
    if (slot.phase != Phase::kUnloaded || slot.waiters.empty()) continue;
    if (next < 0 || slot.waiters.front().since < models_[next].waiters.front().since) {
      next = static_cast<int>(i);
    }
  }
  if (next < 0) return Job{};
  if (limits_.memory_bytes == 0 ||
      ResidentBytes() + models_[next].model.footprint_bytes <= limits_.memory_bytes) {
    return Job{Job::kLoad, next};
  }
  MakeRoomFor(next);
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].phase == Phase::kClosing && models_[i].leases == 0) {
      return Job{Job::kUnload, static_cast<int>(i)};
    }
  }
  return Job{};  // until a closing model's last lease ends
}

Clock::time_point ModelRegistry::NextDeadline() const {
  Clock::time_point next = Clock::now() + std::chrono::hours(1);
  for (const Slot& slot : models_) {
    for (const Waiter& waiter : slot.waiters) next = std::min(next, waiter.since + limits_.load_timeout);
    if (slot.phase == Phase::kLoaded && slot.leases == 0 && limits_.idle_timeout.count() > 0) {
      next = std::min(next, slot.last_used + limits_.idle_timeout);
    }
  }
  return next;
}

void ModelRegistry::Deliver(Grants& grants) {
  for (auto& [granted, result] : grants) granted(std::move(result));
  grants.clear();
}

void ModelRegistry::Loop() {
  std::unique_lock lock(mutex_);
  Grants grants;
  while (!stopping_) {
    const Job job = Plan(Clock::now(), grants);
    if (job.kind == Job::kLoad) {
      Slot& slot = models_[job.index];
      slot.phase = Phase::kLoading;
      const std::string name = slot.model.names.front();
      spdlog::info("loading model {} for {} waiting requests", name, slot.waiters.size());
      lock.unlock();
      Deliver(grants);
      const auto start = Clock::now();
      StatusOr<std::unique_ptr<ServingModel>> loaded = loader_(job.index);
      lock.lock();
      if (loaded.ok()) {
        slot.serving = std::move(*loaded);
        slot.phase = Phase::kLoaded;
        ++slot.loads;
        spdlog::info("model {} loaded ({:.2f} s)", name,
                     std::chrono::duration<double>(Clock::now() - start).count());
        for (Waiter& waiter : slot.waiters) grants.emplace_back(std::move(waiter.granted), LeaseOf(job.index));
      } else {
        spdlog::error("model {} failed to load: {}", name, loaded.status().message());
        slot.phase = Phase::kFailed;
        slot.failure = FailedPreconditionError("model " + name + " failed to load (the server's "
                                               "log says why): " +
                                               std::string(loaded.status().message()));
        for (Waiter& waiter : slot.waiters) grants.emplace_back(std::move(waiter.granted), slot.failure);
      }
      waiting_ -= slot.waiters.size();
      slot.waiters.clear();
    } else if (job.kind == Job::kUnload) {
      Slot& slot = models_[job.index];
      slot.phase = Phase::kUnloading;
      std::unique_ptr<ServingModel> leaving = std::move(slot.serving);
      lock.unlock();
      Deliver(grants);
      leaving.reset();  // the engine stops: no request runs on it, none holds it
      spdlog::info("model {} unloaded", slot.model.names.front());
      lock.lock();
      slot.phase = Phase::kUnloaded;
      ++slot.unloads;
    } else if (grants.empty()) {
      wake_.wait_until(lock, NextDeadline());
      continue;
    }
    lock.unlock();
    Deliver(grants);
    lock.lock();
  }
}

void ModelRegistry::Shutdown(std::chrono::milliseconds drain) {
  Grants grants;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    for (Slot& slot : models_) {
      for (Waiter& waiter : slot.waiters) {
        grants.emplace_back(std::move(waiter.granted),
                            UnavailableError("the server is shutting down: send the request to "
                                             "another server"));
      }
      slot.waiters.clear();
    }
    waiting_ = 0;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  Deliver(grants);
  // The thread is gone: the slots change no more but for their lease counts.
  const auto deadline = Clock::now() + drain;
  for (Slot& slot : models_) {
    if (slot.serving == nullptr) continue;
    const auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
    slot.serving->engine->Shutdown(std::chrono::duration_cast<std::chrono::milliseconds>(left));
  }
}

std::vector<ModelState> ModelRegistry::States() const {
  std::lock_guard lock(mutex_);
  std::vector<ModelState> states;
  for (const Slot& slot : models_) {
    states.push_back({.name = slot.model.names.front(),
                      .loaded = slot.phase == Phase::kLoaded || slot.phase == Phase::kClosing,
                      .loads = slot.loads,
                      .unloads = slot.unloads});
  }
  return states;
}

std::vector<std::string> ModelRegistry::Ids() const {
  std::vector<std::string> ids;
  for (const Slot& slot : models_) ids.push_back(slot.model.names.front());
  return ids;
}

}  // namespace tokenmill::server
