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
constexpr uint64_t kOpen = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kOpen - 1;

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spins, then yields, until done() holds.
template <typename Done>
void WaitUntil(const Done& done) {
  for (int spin = 0; !done(); ++spin) {
    if (spin < kSpinIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::TakeChunks() {
  for (int64_t i = next_chunk_.fetch_add(1, std::memory_order_relaxed); i < n_chunks_;
       i = next_chunk_.fetch_add(1, std::memory_order_relaxed)) {
    (*chunk_fn_)(i);
    done_chunks_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::RunChunks(int64_t n_chunks, const std::function<void(int64_t)>& chunk) {
  if (n_chunks <= 0) return;
  if (num_threads_ == 1 || n_chunks == 1) {
    for (int64_t i = 0; i < n_chunks; ++i) chunk(i);
    return;
  }
  chunk_fn_ = &chunk;
  n_chunks_ = n_chunks;
  next_chunk_.store(0, std::memory_order_relaxed);
  done_chunks_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Open the job (release: the fields above are visible to a worker that joins it).
  state_.store((generation << 32) | kOpen, std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  TakeChunks();
  WaitUntil([&] { return done_chunks_.load(std::memory_order_acquire) == n_chunks; });
  // Close the job so late workers stay out, then wait for those inside to leave.
  state_.fetch_and(~kOpen, std::memory_order_acq_rel);
  WaitUntil([&] { return (state_.load(std::memory_order_acquire) & kCountMask) == 0; });
}

void ThreadPool::WorkerLoop() {
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
    // Join the job only while it is still open and still the one we were woken for.
    uint64_t state = state_.load(std::memory_order_acquire);
    bool joined = false;
    while ((state >> 32) == (now & 0xffffffffu) && (state & kOpen) != 0) {
      if (state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    TakeChunks();
    state_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  TM_CHECK_GT(grain, 0);
  if (n <= 0) return;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // About 8 chunks per thread: enough to rebalance around a late or slow thread.
  const int64_t units = (n + grain - 1) / grain;
  const int64_t units_per_chunk = std::max<int64_t>(1, units / (8 * threads));
  const int64_t chunk = units_per_chunk * grain;
  pool->RunChunks((n + chunk - 1) / chunk, [&](int64_t i) {
    fn(i * chunk, std::min(n, (i + 1) * chunk));
  });
}

}  // namespace tokenmill
