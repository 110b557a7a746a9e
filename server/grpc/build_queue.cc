#include "server/grpc/build_queue.h"

#include <utility>

namespace tokenmill::server {

BuildQueue::BuildQueue(int num_threads) {
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Work(); });
}

BuildQueue::~BuildQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void BuildQueue::Post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void BuildQueue::Work() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace tokenmill::server
