// The CPU's f16 paged attention over one prefill chunk (issue 36): --chunk tokens of one
// sequence at the end of --context positions, the shape of one layer (default Qwen2.5-1.5B's:
// 12 query heads over 2 KV heads of 128), random K/V in shuffled blocks of 16. Reports ms per
// call (median of --reps), GFLOP/s (two multiply-adds per query head, position and element:
// K·q and p·V) and the fraction of this machine's f32 FMA peak, measured here with 256-bit
// FMAs on the same threads (the attention kernels are 256-bit on every SIMD table).
//
//   build/bin/tokenmill_prefill_attention_bench --context 2048 --chunk 512 --threads 2
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/half.h"

namespace tokenmill {
namespace {

template <typename Fn>
double MedianMillis(int reps, const Fn& fn) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const auto end = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// 10 independent chains of 256-bit FMAs (more than the FMA latency times the units), `n`
// rounds: 160 flops a round. Returns a sum so the loop is kept.
__attribute__((target("avx2,fma"))) float FmaChains(int64_t n) {
  __m256 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t r = 0; r < n; ++r) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 10; ++i) sum = _mm256_add_ps(sum, acc[i]);
  return _mm256_cvtss_f32(sum);
}

// GFLOP/s of 256-bit FMAs on every thread of the pool at once.
double FmaPeakGflops(ThreadPool& pool, int threads, int reps) {
  constexpr int64_t kRounds = 20'000'000;
  std::vector<float> sink(static_cast<size_t>(threads));
  const double ms = MedianMillis(reps, [&] {
    ParallelFor(&pool, threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) sink[static_cast<size_t>(t)] = FmaChains(kRounds);
    });
  });
  return 160.0 * kRounds * threads / ms / 1e6;
}

int Main(int argc, char** argv) {
  CLI::App app{"f16 paged attention of a prefill chunk"};
  int heads = 12, kv_heads = 2, dim = 128, context = 2048, chunk = 512, threads = 2, reps = 5;
  app.add_option("--heads", heads, "query heads");
  app.add_option("--kv-heads", kv_heads, "KV heads");
  app.add_option("--dim", dim, "head size");
  app.add_option("--context", context, "positions after the chunk");
  app.add_option("--chunk", chunk, "prefill tokens (the last of the context)");
  app.add_option("--threads", threads, "CPU threads");
  app.add_option("--reps", reps, "calls per measurement (the median is reported)");
  CLI11_PARSE(app, argc, argv);
  if (chunk < 1 || chunk > context || heads % kv_heads != 0) {
    std::fprintf(stderr, "need 1 <= chunk <= context and heads a multiple of kv-heads\n");
    return 2;
  }

  constexpr int kBlock = 16;
  const int blocks = (context + kBlock - 1) / kBlock;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> k(static_cast<size_t>(blocks) * kBlock * kv_heads * dim), v(k.size());
  for (uint16_t& x : k) x = FloatToHalf(normal(rng));
  for (uint16_t& x : v) x = FloatToHalf(normal(rng));
  std::vector<int32_t> block_ids(static_cast<size_t>(blocks));
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);

  std::vector<int32_t> positions(static_cast<size_t>(chunk));
  std::vector<int64_t> slots(positions.size());
  for (int t = 0; t < chunk; ++t) {
    const int32_t pos = context - chunk + t;
    positions[t] = pos;
    slots[t] = int64_t{block_ids[pos / kBlock]} * kBlock + pos % kBlock;
  }
  const std::vector<int32_t> cu_seqlens = {0, chunk}, kv_indptr = {0, blocks},
                             last_len = {context - (blocks - 1) * kBlock};
  const KvBlockTable table{slots, kv_indptr, block_ids, last_len};
  const RaggedBatch batch{positions, cu_seqlens, {&table, 1}};
  const KvCacheView kv{KvType::kF16, k.data(), v.data(), blocks, kBlock, kv_heads, dim,
                       nullptr, nullptr};

  std::vector<float> q(static_cast<size_t>(chunk) * heads * dim), out(q.size());
  for (float& x : q) x = normal(rng);
  ThreadPool pool(threads);
  const CpuContext ctx{&KernelTable(BestCpuIsa()), &pool};
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const double ms = MedianMillis(reps, [&] {
    PagedAttention(ctx, kv, batch, table, q.data(), heads, scale, out.data());
  });
  double attended = 0.0;  // Σ over the chunk's tokens of the positions each attends to
  for (int32_t pos : positions) attended += pos + 1;
  const double gflops = 4.0 * heads * dim * attended / ms / 1e6;
  const double peak = FmaPeakGflops(pool, threads, 3);
  std::printf("heads %d/%d x %d, context %d, chunk %d, %d threads, %s table\n", heads, kv_heads,
              dim, context, chunk, threads, std::string(IsaName(BestCpuIsa())).c_str());
  std::printf("%.2f ms a call, %.1f GFLOP/s, %.1f%% of the 256-bit FMA peak (%.1f GFLOP/s)\n",
              ms, gflops, 100.0 * gflops / peak, peak);
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) { return tokenmill::Main(argc, argv); }
