#include "server/metrics/request_metrics.h"

namespace tokenmill::server {
namespace {

// vLLM's bucket bounds, so dashboards built for it read ours the same way.
std::vector<double> TimeToFirstTokenBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> TimePerOutputTokenBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> RequestLatencyBuckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace

RequestMetrics::RequestMetrics()
    : time_to_first_token_(TimeToFirstTokenBuckets()),
      time_per_output_token_(TimePerOutputTokenBuckets()),
      e2e_request_latency_(RequestLatencyBuckets()),
      request_queue_time_(RequestLatencyBuckets()) {}

void RequestMetrics::ObserveFinished(const RequestTimings& timings, CompletionReason reason) {
  finished_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  e2e_request_latency_.Observe(timings.total_seconds);
  if (timings.token_seconds.empty()) return;  // never scheduled or never sampled
  request_queue_time_.Observe(timings.queue_seconds);
  time_to_first_token_.Observe(timings.time_to_first_token);
  // token_seconds[0] is the first token's wait; the rest are inter-token gaps.
  for (size_t i = 1; i < timings.token_seconds.size(); ++i) {
    time_per_output_token_.Observe(timings.token_seconds[i]);
  }
}

}  // namespace tokenmill::server
