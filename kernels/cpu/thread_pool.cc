#include "kernels/cpu/thread_pool.h"

#include <algorithm>

#include "common/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tokenmill {
namespace {

// About 50 µs of spinning (pause is ~100+ cycles), then sleep: on a busy machine a spinning
// thread would steal the core from the one it waits for.
constexpr int kSpinIterations = 1000;

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::Run(const std::function<void(int)>& job) {
  if (num_threads_ == 1) {
    job(0);
    return;
  }
  job_ = &job;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  job(0);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      CpuRelax();
    } else {
      const int left = pending_.load(std::memory_order_acquire);
      if (left != 0) pending_.wait(left, std::memory_order_acquire);
    }
  }
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen; ++spin) {
      if (spin < kSpinIterations) {
        CpuRelax();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  TM_CHECK_GT(grain, 0);
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  if (threads == 1 || n <= grain) {
    if (n > 0) fn(0, n);
    return;
  }
  const int64_t units = (n + grain - 1) / grain;
  pool->Run([&](int t) {
    const int64_t begin = std::min(n, units * t / threads * grain);
    const int64_t end = std::min(n, units * (t + 1) / threads * grain);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace tokenmill
