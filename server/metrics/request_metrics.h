// What the server measures per finished request, for /metrics: latency histograms (named and
// bucketed like vLLM's) and finished-request counts by reason. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "engine/generate_output.h"
#include "server/metrics/histogram.h"

namespace tokenmill::server {

class RequestMetrics {
 public:
  RequestMetrics();

  // A request's final event: its timings and why it finished.
  void ObserveFinished(const RequestTimings& timings, CompletionReason reason);

  HistogramSnapshot time_to_first_token() const { return time_to_first_token_.Snapshot(); }
  HistogramSnapshot time_per_output_token() const { return time_per_output_token_.Snapshot(); }
  HistogramSnapshot e2e_request_latency() const { return e2e_request_latency_.Snapshot(); }
  HistogramSnapshot request_queue_time() const { return request_queue_time_.Snapshot(); }
  uint64_t finished(CompletionReason reason) const {
    return finished_[static_cast<size_t>(reason)].load(std::memory_order_relaxed);
  }

 private:
  Histogram time_to_first_token_;
  Histogram time_per_output_token_;
  Histogram e2e_request_latency_;
  Histogram request_queue_time_;
  std::array<std::atomic<uint64_t>, 5> finished_{};  // indexed by CompletionReason
};

}  // namespace tokenmill::server
