#include "gateway/backends/backend_pool.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "gateway/backends/affinity.h"

namespace tokenmill::gateway {

Backend::Backend(std::string address, const BackendSecurity& security)
    : address_(std::move(address)),
      channel_(MakeBackendChannel(address_, security)),
      stub_(v1::Inference::NewStub(channel_)),
      health_stub_(grpc::health::v1::Health::NewStub(channel_)) {}

std::optional<v1::ModelInfo> Backend::model_info() const {
  std::lock_guard lock(mutex_);
  return model_info_;
}

void Backend::Check(std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("tokenmill.v1.Inference");
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health_stub_->Check(&context, request, &response);
  bool serving = status.ok() &&
                 response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  const bool was_healthy = healthy();
  std::string names;  // the model's own names, for the log
  if (serving) {
    // On the way up: learn (again) which model it serves; a restarted server may hold
    // another model. Then at every check, as long as its default model stays loaded (without
    // loading it or keeping it from its idle unload): it gains and loses LoRA adapters (its
    // admin's /v1/load_lora_adapter). A failed refresh keeps what was learnt.
    grpc::ClientContext info_context;
    info_context.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::GetModelInfoRequest info_request;
    info_request.set_loaded_only(was_healthy);
    v1::ModelInfo info;
    const grpc::Status info_status = stub_->GetModelInfo(&info_context, info_request, &info);
    if (info_status.ok()) {
      names = info.served_model_names().empty()
                  ? info.name()
                  : fmt::format("{}", fmt::join(info.served_model_names().begin(),
                                                info.served_model_names().end(), ", "));
      std::lock_guard lock(mutex_);
      model_info_ = info;
    } else if (!was_healthy) {
      serving = false;
    }
  }
  if (serving != was_healthy) {
    healthy_.store(serving, std::memory_order_release);
    if (serving) {
      spdlog::info("backend {} is ready (model {})", address_, names);
    } else {
      spdlog::warn("backend {} is not ready: {}", address_,
                   status.ok() ? "health NOT_SERVING" : status.error_message());
    }
  }
}

BackendLease::BackendLease(Backend& backend) : backend_(backend) {
  backend_.in_flight_.fetch_add(1, std::memory_order_relaxed);
  backend_.requests_.fetch_add(1, std::memory_order_relaxed);
}

BackendLease::~BackendLease() { backend_.in_flight_.fetch_sub(1, std::memory_order_relaxed); }

BackendPool::BackendPool(const std::vector<std::string>& addresses,
                         const BackendSecurity& security, std::chrono::milliseconds interval,
                         int affinity_max_imbalance,
                         std::vector<std::string> served_model_names)
    : interval_(interval),
      affinity_max_imbalance_(affinity_max_imbalance),
      served_model_names_(std::move(served_model_names)) {
  for (const std::string& address : addresses) {
    backends_.push_back(std::make_unique<Backend>(address, security));
  }
  thread_ = std::thread([this] { HealthLoop(); });
}

BackendPool::~BackendPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void BackendPool::HealthLoop() {
  const auto timeout = std::max(std::chrono::milliseconds(200),
                                std::min(interval_, std::chrono::milliseconds(2000)));
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    for (const std::unique_ptr<Backend>& backend : backends_) backend->Check(timeout);
    lock.lock();
    stop_cv_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

std::vector<std::string> BackendPool::ModelNamesOf(const v1::ModelInfo& info) const {
  if (!served_model_names_.empty()) return served_model_names_;
  if (info.served_model_names_size() > 0) {
    return {info.served_model_names().begin(), info.served_model_names().end()};
  }
  return {info.name()};
}

std::string BackendPool::ModelNameOf(const v1::ModelInfo& info) const {
  return ModelNamesOf(info).front();
}

ModelMatch BackendPool::Match(const v1::ModelInfo& info, const std::string& model) const {
  const std::vector<std::string> names = ModelNamesOf(info);
  if (model.empty() || std::find(names.begin(), names.end(), model) != names.end()) {
    return ModelMatch::kBase;
  }
  const auto& adapters = info.lora_adapters();
  if (std::find(adapters.begin(), adapters.end(), model) != adapters.end()) {
    return ModelMatch::kAdapter;
  }
  // The first of ModelInfo.models is the default model, which ModelNamesOf names (and the
  // gateway's --served-model-name may rename).
  const auto& served = info.models();
  if (!served.empty() && std::find(served.begin() + 1, served.end(), model) != served.end()) {
    return ModelMatch::kServed;
  }
  return ModelMatch::kNone;
}

bool BackendPool::AnyHealthy() const {
  for (const std::unique_ptr<Backend>& backend : backends_) {
    if (backend->healthy()) return true;
  }
  return false;
}

BackendChoice BackendPool::Choose(const std::string& model, std::string_view affinity_key,
                                  bool adapters) {
  BackendChoice choice;
  std::vector<BackendCandidate> candidates;
  std::vector<ModelMatch> matches;
  candidates.reserve(backends_.size());
  matches.reserve(backends_.size());
  for (const std::unique_ptr<Backend>& backend : backends_) {
    BackendCandidate candidate;
    candidate.address = backend->address();
    candidate.in_flight = backend->in_flight();
    ModelMatch match = ModelMatch::kNone;
    if (backend->healthy()) {
      choice.any_healthy = true;
      const std::optional<v1::ModelInfo> info = backend->model_info();
      if (info) match = Match(*info, model);
      if (match == ModelMatch::kAdapter) choice.adapter = true;
      candidate.eligible = match == ModelMatch::kBase || match == ModelMatch::kServed ||
                           (adapters && match == ModelMatch::kAdapter);
      candidate.hashed = candidate.eligible || !info;
    }
    candidates.push_back(candidate);
    matches.push_back(match);
  }
  // A model the request names (an adapter, another model) caches prefixes of its own.
  const bool named = choice.adapter || std::ranges::find(matches, ModelMatch::kServed) !=
                                           matches.end();
  const std::string key =
      named ? AdapterAffinityKey(model, affinity_key) : std::string(affinity_key);
  const int index = ChooseBackend(candidates, key, affinity_max_imbalance_);
  if (index >= 0) {
    choice.backend = backends_[index].get();
    choice.adapter = matches[index] == ModelMatch::kAdapter;
    choice.served = matches[index] == ModelMatch::kServed;
  }
  return choice;
}

}  // namespace tokenmill::gateway
