#include "server/metrics/histogram.h"

#include <algorithm>

#include "common/check.h"

namespace tokenmill::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  TM_CHECK(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()))
      << "histogram bounds must be ascending";
}

void Histogram::Observe(double value) {
  std::lock_guard lock(mutex_);
  // Prometheus buckets are "less than or equal": the first bound >= value.
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot snapshot;
  std::lock_guard lock(mutex_);
  snapshot.upper_bounds = upper_bounds_;
  uint64_t running = 0;
  for (const uint64_t c : counts_) {
    running += c;
    snapshot.bucket_counts.push_back(running);
  }
  snapshot.sum = sum_;
  snapshot.count = count_;
  return snapshot;
}

void Histogram::Reset(std::vector<double> upper_bounds) {
  TM_CHECK(std::is_sorted(upper_bounds.begin(), upper_bounds.end()))
      << "histogram bounds must be ascending";
  std::lock_guard lock(mutex_);
  upper_bounds_ = std::move(upper_bounds);
  counts_.assign(upper_bounds_.size() + 1, 0);
  sum_ = 0.0;
  count_ = 0;
}

}  // namespace tokenmill::server
