// A small fixed pool of threads for the CPU kernels. Work is cut into chunks that the
// caller and the workers take from a shared counter, so a worker that is slow to wake
// (a busy machine) simply takes fewer chunks instead of holding everyone up. Workers spin
// briefly before sleeping, because a decode step runs a few hundred short jobs.
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
  // Calls chunk(i) once for every i in [0, n_chunks), on the caller and on whichever
  // workers join in time; returns when all are done and no worker still holds the job.
  // One call at a time.
  void RunChunks(int64_t n_chunks, const std::function<void(int64_t)>& chunk);

 private:
  void WorkerLoop();
  void TakeChunks();

  int num_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};  // bumped per job; workers wait on it
  std::atomic<bool> stop_{false};
  // (job generation << 32) | kOpen | number of workers inside the job.
  std::atomic<uint64_t> state_{0};
  const std::function<void(int64_t)>* chunk_fn_ = nullptr;
  int64_t n_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> done_chunks_{0};
};

// Splits [0, n) into chunks of at least `grain` (multiples of it) and calls fn(begin,
// end) for each, spread over the pool's threads. A null pool runs inline. Which thread
// runs a chunk never changes what it computes.
void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tokenmill
