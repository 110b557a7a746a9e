// The gateway's own Prometheus metrics: requests by route and status, latency by route,
// requests in flight, and per backend health, in-flight and routed counts. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gateway/backends/backend_pool.h"

namespace tokenmill::gateway {

class GatewayMetrics {
 public:
  void RequestStarted() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
  // `route`: the route's label (routes.h).
  void RequestFinished(const std::string& route, int status, double seconds);
  // Backend responses read and not yet written to their clients (all requests), the most
  // one request held, and how often a Generate stream paused because its client was slow.
  void ResponsesBuffered(int64_t delta) { buffered_.fetch_add(delta, std::memory_order_relaxed); }
  void ObserveRequestBuffered(size_t count);
  void ReadPaused() { read_pauses_.fetch_add(1, std::memory_order_relaxed); }
  // Requests started and not yet answered in full (what a drain waits for).
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

  // The exposition text (version 0.0.4).
  std::string Render(const BackendPool& pool) const;

 private:
  struct Latency {
    std::vector<uint64_t> counts;  // per bucket, not cumulative; last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };

  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> buffered_{0};
  std::atomic<uint64_t> max_request_buffered_{0};
  std::atomic<uint64_t> read_pauses_{0};
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status) -> count
  std::map<std::string, Latency> latency_;                     // by route
};

}  // namespace tokenmill::gateway
