// A small fixed pool of threads for the CPU kernels. Run() executes one job on every
// thread (the caller is thread 0) and returns when all are done. Workers spin briefly
// before sleeping, because a decode step launches a few hundred short jobs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace tokenmill {

class ThreadPool {
 public:
  // num_threads counts the caller; 1 means no worker threads.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Calls job(thread_index) once on each thread, index 0 on the caller.
  void Run(const std::function<void(int)>& job);

 private:
  void WorkerLoop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int)>* job_ = nullptr;
};

// Splits [0, n) into one contiguous range per thread (multiples of `grain` except the
// last) and calls fn(begin, end) for each non-empty one. A null pool runs inline.
void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tokenmill
