// What the server measures per finished request, for /metrics: latency and token-count
// histograms (named and bucketed like vLLM's) and finished-request counts by reason.
// Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "engine/generate_output.h"
#include "server/metrics/histogram.h"

namespace tokenmill::server {

// vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to the context length.
std::vector<double> TokenCountBuckets(int max_model_len);

class RequestMetrics {
 public:
  RequestMetrics();

  // The token-count histograms' buckets follow the context length, known once the model
  // loads: call this before the first request (it clears those histograms unless the length
  // is the one they have: a model loaded again keeps its counts). One caller at a time.
  void SetMaxModelLen(int max_model_len);

  // A sequence's final event: its timings, why it finished and its token counts.
  void ObserveFinished(const RequestTimings& timings, CompletionReason reason,
                       const RequestUsage& usage);
  // Once per request, after its last sequence finished: its n and max_tokens, and the most
  // tokens one of its sequences generated.
  void ObserveRequest(int n, int max_tokens, int max_generated_tokens);

  // Submit -> first token; the gaps between tokens; submit -> finished; submit -> scheduled.
  HistogramSnapshot time_to_first_token() const { return time_to_first_token_.Snapshot(); }
  HistogramSnapshot time_per_output_token() const { return time_per_output_token_.Snapshot(); }
  HistogramSnapshot e2e_request_latency() const { return e2e_request_latency_.Snapshot(); }
  HistogramSnapshot request_queue_time() const { return request_queue_time_.Snapshot(); }
  // Scheduled -> first token, first -> last token, scheduled -> last token, and a
  // request's decode time per token after the first (vLLM's request phases).
  HistogramSnapshot prefill_time() const { return prefill_time_.Snapshot(); }
  HistogramSnapshot decode_time() const { return decode_time_.Snapshot(); }
  HistogramSnapshot inference_time() const { return inference_time_.Snapshot(); }
  HistogramSnapshot mean_time_per_output_token() const {
    return mean_time_per_output_token_.Snapshot();
  }
  // Per sequence: prompt tokens, of those computed (not from the prefix cache), generated.
  HistogramSnapshot prompt_tokens() const { return prompt_tokens_.Snapshot(); }
  HistogramSnapshot prefill_computed_tokens() const { return prefill_computed_tokens_.Snapshot(); }
  HistogramSnapshot generation_tokens() const { return generation_tokens_.Snapshot(); }
  // Per request.
  HistogramSnapshot params_n() const { return params_n_.Snapshot(); }
  HistogramSnapshot params_max_tokens() const { return params_max_tokens_.Snapshot(); }
  HistogramSnapshot max_generation_tokens() const { return max_generation_tokens_.Snapshot(); }
  uint64_t finished(CompletionReason reason) const {
    return finished_[static_cast<size_t>(reason)].load(std::memory_order_relaxed);
  }

 private:
  Histogram time_to_first_token_;
  Histogram time_per_output_token_;
  Histogram e2e_request_latency_;
  Histogram request_queue_time_;
  Histogram prefill_time_;
  Histogram decode_time_;
  Histogram inference_time_;
  Histogram mean_time_per_output_token_;
  Histogram prompt_tokens_;
  Histogram prefill_computed_tokens_;
  Histogram generation_tokens_;
  Histogram params_n_;
  Histogram params_max_tokens_;
  Histogram max_generation_tokens_;
  std::array<std::atomic<uint64_t>, 5> finished_{};  // indexed by CompletionReason
  int max_model_len_ = 0;  // SetMaxModelLen's
};

}  // namespace tokenmill::server
