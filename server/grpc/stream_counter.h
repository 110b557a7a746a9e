// Counts open Generate streams so that draining can wait for them to end.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tokenmill::server {

class StreamCounter {
 public:
  void Opened() {
    std::lock_guard lock(mutex_);
    ++open_;
  }
  void Closed() {
    std::lock_guard lock(mutex_);
    if (--open_ == 0) all_closed_.notify_all();
  }
  int open() const {
    std::lock_guard lock(mutex_);
    return open_;
  }
  // True when no stream is open by `deadline`.
  bool WaitUntilNoneOpen(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    return all_closed_.wait_until(lock, deadline, [this] { return open_ == 0; });
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable all_closed_;
  int open_ = 0;
};

}  // namespace tokenmill::server
