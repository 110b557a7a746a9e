// Threads that build requests whose building may take long (structured output: compiling a
// grammar, up to GrammarLimits::max_compile_time), so that it holds neither the engine thread
// nor gRPC's callback threads, which serve every other call and the health checks. Jobs run
// in arrival order; the destructor runs those still queued, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tokenmill::server {

class BuildQueue {
 public:
  explicit BuildQueue(int num_threads);
  ~BuildQueue();
  BuildQueue(const BuildQueue&) = delete;
  BuildQueue& operator=(const BuildQueue&) = delete;

  void Post(std::function<void()> job);

 private:
  void Work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tokenmill::server
