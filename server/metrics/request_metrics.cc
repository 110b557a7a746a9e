#include "server/metrics/request_metrics.h"

#include <numeric>

namespace tokenmill::server {
namespace {

// vLLM's bucket bounds (vllm/v1/metrics/buckets.py), so dashboards built for it read ours
// the same way.
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
std::vector<double> RequestParamsNBuckets() { return {1, 2, 5, 10, 20}; }

}  // namespace

std::vector<double> TokenCountBuckets(int max_model_len) {
  std::vector<double> bounds;
  for (double scale = 1;; scale *= 10) {
    for (const double mantissa : {1, 2, 5}) {
      if (mantissa * scale > max_model_len) return bounds;
      bounds.push_back(mantissa * scale);
    }
  }
}

RequestMetrics::RequestMetrics()
    : time_to_first_token_(TimeToFirstTokenBuckets()),
      time_per_output_token_(TimePerOutputTokenBuckets()),
      e2e_request_latency_(RequestLatencyBuckets()),
      request_queue_time_(RequestLatencyBuckets()),
      prefill_time_(RequestLatencyBuckets()),
      decode_time_(RequestLatencyBuckets()),
      inference_time_(RequestLatencyBuckets()),
      mean_time_per_output_token_(TimePerOutputTokenBuckets()),
      prompt_tokens_({}),
      prefill_computed_tokens_({}),
      generation_tokens_({}),
      params_n_(RequestParamsNBuckets()),
      params_max_tokens_({}),
      max_generation_tokens_({}) {}

void RequestMetrics::SetMaxModelLen(int max_model_len) {
  if (max_model_len == max_model_len_) return;
  max_model_len_ = max_model_len;
  for (Histogram* h : {&prompt_tokens_, &prefill_computed_tokens_, &generation_tokens_,
                       &params_max_tokens_, &max_generation_tokens_}) {
    h->Reset(TokenCountBuckets(max_model_len));
  }
}

void RequestMetrics::ObserveFinished(const RequestTimings& timings, CompletionReason reason,
                                     const RequestUsage& usage) {
  finished_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  e2e_request_latency_.Observe(timings.total_seconds);
  prompt_tokens_.Observe(usage.prompt_tokens);
  prefill_computed_tokens_.Observe(usage.prompt_tokens - usage.cached_prompt_tokens);
  generation_tokens_.Observe(usage.completion_tokens);
  if (timings.token_seconds.empty()) return;  // never scheduled or never sampled
  request_queue_time_.Observe(timings.queue_seconds);
  time_to_first_token_.Observe(timings.time_to_first_token);
  // token_seconds[0] is the first token's wait; the rest are inter-token gaps.
  for (size_t i = 1; i < timings.token_seconds.size(); ++i) {
    time_per_output_token_.Observe(timings.token_seconds[i]);
  }
  const double prefill = timings.time_to_first_token - timings.queue_seconds;
  const double decode =
      std::accumulate(timings.token_seconds.begin() + 1, timings.token_seconds.end(), 0.0);
  prefill_time_.Observe(prefill);
  decode_time_.Observe(decode);
  inference_time_.Observe(prefill + decode);
  const size_t gaps = timings.token_seconds.size() - 1;
  mean_time_per_output_token_.Observe(gaps > 0 ? decode / static_cast<double>(gaps) : 0.0);
}

void RequestMetrics::ObserveRequest(int n, int max_tokens, int max_generated_tokens) {
  params_n_.Observe(n);
  params_max_tokens_.Observe(max_tokens);
  max_generation_tokens_.Observe(max_generated_tokens);
}

}  // namespace tokenmill::server
