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

// Takes the front chunk of a run (own) or its back chunk (stolen); false when it is empty.
bool TakeFront(std::atomic<uint64_t>& bounds, int64_t& chunk) {
  uint64_t b = bounds.load(std::memory_order_relaxed);
  while ((b & 0xffffffffu) < (b >> 32)) {
    if (bounds.compare_exchange_weak(b, b + 1, std::memory_order_relaxed)) {
      chunk = static_cast<int64_t>(b & 0xffffffffu);
      return true;
    }
  }
  return false;
}

bool TakeBack(std::atomic<uint64_t>& bounds, int64_t& chunk) {
  uint64_t b = bounds.load(std::memory_order_relaxed);
  while ((b & 0xffffffffu) < (b >> 32)) {
    if (bounds.compare_exchange_weak(b, b - (uint64_t{1} << 32), std::memory_order_relaxed)) {
      chunk = static_cast<int64_t>(b >> 32) - 1;
      return true;
    }
  }
  return false;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)), runs_(new Run[static_cast<size_t>(num_threads_)]) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::TakeChunks(int slot) {
  int64_t done = 0;
  int64_t chunk = 0;
  while (TakeFront(runs_[slot].bounds, chunk)) {
    (*chunk_fn_)(chunk);
    ++done;
  }
  for (int i = 1; i < num_threads_; ++i) {
    std::atomic<uint64_t>& victim = runs_[(slot + i) % num_threads_].bounds;
    while (TakeBack(victim, chunk)) {
      (*chunk_fn_)(chunk);
      ++done;
    }
  }
  // Once per thread and job (release: the chunks' outputs are visible to the caller).
  if (done > 0) done_chunks_.fetch_add(done, std::memory_order_release);
}

void ThreadPool::RunChunks(int64_t n_chunks, const std::function<void(int64_t)>& chunk) {
  if (n_chunks <= 0) return;
  if (num_threads_ == 1 || n_chunks == 1) {
    for (int64_t i = 0; i < n_chunks; ++i) chunk(i);
    return;
  }
  TM_CHECK_LT(n_chunks, int64_t{1} << 31);
  chunk_fn_ = &chunk;
  for (int i = 0; i < num_threads_; ++i) {
    const uint64_t front = static_cast<uint64_t>(n_chunks * i / num_threads_);
    const uint64_t back = static_cast<uint64_t>(n_chunks * (i + 1) / num_threads_);
    runs_[i].bounds.store((back << 32) | front, std::memory_order_relaxed);
  }
  done_chunks_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Open the job (release: the fields above are visible to a worker that joins it).
  state_.store((generation << 32) | kOpen, std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  TakeChunks(0);
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
    // Join the job only while it is still open and still the one we were woken for; the
    // n-th worker to join takes run n (any run left untaken is stolen by the others).
    uint64_t state = state_.load(std::memory_order_acquire);
    int slot = 0;
    while ((state >> 32) == (now & 0xffffffffu) && (state & kOpen) != 0) {
      if (state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel)) {
        slot = static_cast<int>(state & kCountMask) + 1;
        break;
      }
    }
    if (slot == 0) continue;
    TakeChunks(slot);
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
