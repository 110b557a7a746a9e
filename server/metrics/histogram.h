// A Prometheus histogram: observations counted into fixed buckets. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace tokenmill::server {

struct HistogramSnapshot {
  std::vector<double> upper_bounds;     // ascending; +Inf is implied
  std::vector<uint64_t> bucket_counts;  // cumulative, one per bound, then +Inf (= count)
  double sum = 0.0;
  uint64_t count = 0;
};

class Histogram {
 public:
  // `upper_bounds` must be ascending.
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double value);
  HistogramSnapshot Snapshot() const;
  // New bounds and no observations: for buckets known only once the model loads.
  void Reset(std::vector<double> upper_bounds);

 private:
  std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

}  // namespace tokenmill::server
