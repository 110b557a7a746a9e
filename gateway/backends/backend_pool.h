// The tokenmill-servers behind the gateway: one gRPC channel each, health-checked with
// grpc.health.v1 on an interval by one thread (never an I/O thread), their ModelInfo
// fetched when they turn healthy, and in-flight counts for routing. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

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

#include "gateway/backends/backend_channel.h"
#include "health.grpc.pb.h"
#include "tokenmill/v1/inference.grpc.pb.h"

namespace tokenmill::gateway {

class Backend {
 public:
  Backend(std::string address, const BackendSecurity& security);

  const std::string& address() const { return address_; }
  v1::Inference::Stub& stub() { return *stub_; }
  bool healthy() const { return healthy_.load(std::memory_order_acquire); }
  int in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  // The model it serves; empty before its first healthy check.
  std::optional<v1::ModelInfo> model_info() const;

 private:
  friend class BackendPool;
  friend class BackendLease;

  // One health check and a ModelInfo fetch (on the way up, the model loaded for it; later,
  // only if it is loaded); blocking, on the pool's thread.
  void Check(std::chrono::milliseconds timeout);

  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  std::atomic<bool> healthy_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> requests_{0};
  mutable std::mutex mutex_;
  std::optional<v1::ModelInfo> model_info_;
};

// Counts one request in flight on a backend for as long as it lives.
class BackendLease {
 public:
  explicit BackendLease(Backend& backend);
  ~BackendLease();
  BackendLease(const BackendLease&) = delete;
  BackendLease& operator=(const BackendLease&) = delete;

  Backend& backend() const { return backend_; }

 private:
  Backend& backend_;
};

// What a backend's model is to a request's `model`.
enum class ModelMatch {
  kNone,     // another model
  kBase,     // the base model: one of BackendPool::ModelNamesOf (or no name at all)
  kAdapter,  // one of its LoRA adapters (ModelInfo.lora_adapters: the server's --lora)
  kServed,   // another model the server serves (ModelInfo.models: its --model NAME=PATH)
};

struct BackendChoice {
  Backend* backend = nullptr;  // null: none is ready for the model
  bool any_healthy = false;    // false: 503; true with no backend: the model is unknown (404)
  // The model is a LoRA adapter: of `backend`, or (with none) of a ready backend whose
  // adapters the request may not name.
  bool adapter = false;
  bool served = false;  // the model is another of `backend`'s models (ModelMatch::kServed)
};

class BackendPool {
 public:
  // Starts checking at once (the first round runs immediately).
  BackendPool(const std::vector<std::string>& addresses, const BackendSecurity& security,
              std::chrono::milliseconds interval, int affinity_max_imbalance,
              std::vector<std::string> served_model_names);
  // Stops the health thread.
  ~BackendPool();

  // A healthy backend for `model` (empty: any model) by the affinity key's rendezvous hash,
  // or the least-loaded one (see affinity.h). With `adapters` a LoRA adapter's name routes to
  // a backend that has it, its key salted by the adapter (AdapterAffinityKey); without, only
  // base models' names route.
  BackendChoice Choose(const std::string& model, std::string_view affinity_key, bool adapters);

  bool AnyHealthy() const;
  // The names clients call a backend's model by: the gateway's --served-model-name, else the
  // server's own (a server too old to send them: its ModelInfo name). The first is its id.
  std::vector<std::string> ModelNamesOf(const v1::ModelInfo& info) const;
  // Its id in the API (responses' `model`, as vLLM's): the first of ModelNamesOf.
  std::string ModelNameOf(const v1::ModelInfo& info) const;
  // `model` against ModelNamesOf(info), then the LoRA adapters' and the server's other models'
  // names (which the gateway's --served-model-name leaves as the server calls them).
  ModelMatch Match(const v1::ModelInfo& info, const std::string& model) const;
  const std::vector<std::unique_ptr<Backend>>& backends() const { return backends_; }

 private:
  void HealthLoop();

  std::vector<std::unique_ptr<Backend>> backends_;
  const std::chrono::milliseconds interval_;
  const int affinity_max_imbalance_;
  const std::vector<std::string> served_model_names_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tokenmill::gateway
