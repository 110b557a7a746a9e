// The kernels of one single-stream decode step in SmolLM2-135M's shapes, with random
// weights, by thread count: the 30 layers' Q4_1 matmuls (66 MB, read from memory as a
// decode step reads them), the Q8_0 output matrix (49152 x 576, 30 MB) and f16 paged
// attention of one token over --positions positions (30 layers of K/V, caches flushed
// between passes). Wall time, median of --reps passes; run under the benchmark lock.
//
//   build/bin/tokenmill_decode_kernels_bench --threads 1,2 --positions 640
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/half.h"
#include "kernels/tensor_type.h"

namespace tokenmill {
namespace {

constexpr int kLayers = 30;

std::vector<uint8_t> RandomBlocks(int64_t rows, int64_t cols, TensorType type, std::mt19937& rng) {
  const GgmlTypeLayout& layout = LayoutOf(type);
  std::vector<uint8_t> data(static_cast<size_t>(rows * cols / 32 * layout.type_size));
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  // Small finite f16 scales (and Q4_1 minimums) at the start of every block.
  const uint16_t scale = 0x2000;
  for (size_t b = 0; b < data.size(); b += layout.type_size) {
    std::memcpy(&data[b], &scale, 2);
    if (type == TensorType::kQ4_1) std::memcpy(&data[b + 2], &scale, 2);
  }
  return data;
}

// Median wall microseconds of fn over reps passes, `before` run untimed before each.
double MedianMicros(int reps, const std::function<void()>& before, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    before();
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int Main(int argc, char** argv) {
  CLI::App app{"decode-step kernels by thread count"};
  std::vector<int> thread_counts = {1, 2};
  int positions = 640, reps = 21;
  app.add_option("--threads", thread_counts, "thread counts")->delimiter(',');
  app.add_option("--positions", positions, "attention context length");
  app.add_option("--reps", reps, "passes per measurement (the median is reported)");
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(1);
  struct Shape {
    int64_t rows, cols;
  };
  // q+k+v, o, gate+up, down.
  const Shape shapes[] = {{960, 576}, {576, 576}, {3072, 576}, {576, 1536}};
  std::vector<std::vector<uint8_t>> layer_data;
  std::vector<WeightMatrix> layer_ws;
  layer_data.reserve(kLayers * 4);
  for (int l = 0; l < kLayers; ++l) {
    for (const Shape& s : shapes) {
      layer_data.push_back(RandomBlocks(s.rows, s.cols, TensorType::kQ4_1, rng));
      layer_ws.push_back({TensorType::kQ4_1, layer_data.back().data(), s.rows, s.cols,
                          s.cols / 32 * 20});
    }
  }
  const std::vector<uint8_t> output_data = RandomBlocks(49152, 576, TensorType::kQ8_0, rng);
  const WeightMatrix output{TensorType::kQ8_0, output_data.data(), 49152, 576, 576 / 32 * 34};

  constexpr int kBlock = 16, kKvHeads = 3, kHeads = 9, kDim = 64;
  const int blocks = (positions + kBlock - 1) / kBlock;
  const int64_t kv_elements = int64_t{blocks} * kBlock * kKvHeads * kDim;
  std::vector<std::vector<uint16_t>> k(kLayers), v(kLayers);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int l = 0; l < kLayers; ++l) {
    k[l].resize(static_cast<size_t>(kv_elements));
    v[l].resize(k[l].size());
    for (uint16_t& x : k[l]) x = FloatToHalf(normal(rng));
    for (uint16_t& x : v[l]) x = FloatToHalf(normal(rng));
  }
  std::vector<int32_t> block_ids(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) block_ids[b] = b;
  const std::vector<int32_t> token_pos = {positions - 1}, cu_seqlens = {0, 1},
                             kv_indptr = {0, blocks},
                             last_len = {positions - (blocks - 1) * kBlock};
  const std::vector<int64_t> slots = {positions - 1};
  const KvBlockTable table{slots, kv_indptr, block_ids, last_len};
  const RaggedBatch batch{token_pos, cu_seqlens, {&table, 1}};

  std::vector<float> x(1536), y(49152), q(kHeads * kDim), attn(kHeads * kDim);
  for (float& e : x) e = normal(rng);
  for (float& e : q) e = normal(rng);
  std::vector<uint8_t> flush(size_t{128} << 20);
  auto flush_caches = [&] {
    for (size_t i = 0; i < flush.size(); i += 64) ++flush[i];
  };
  std::printf("%7s %22s %22s %24s\n", "threads", "Q4_1 layers ms (GB/s)", "Q8_0 output ms (GB/s)",
              "attention us per layer");
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const CpuContext ctx{&KernelTable(BestCpuIsa()), &pool};
    // Every layer's matrices once per pass: 66 MB, more than the caches hold.
    const double layers_us = MedianMicros(reps, [] {}, [&] {
      for (const WeightMatrix& w : layer_ws) Matmul(ctx, w, x.data(), 1, y.data());
    });
    const double output_us = MedianMicros(reps, flush_caches, [&] {
      Matmul(ctx, output, x.data(), 1, y.data());
    });
    const double attention_us = MedianMicros(reps, flush_caches, [&] {
      for (int l = 0; l < kLayers; ++l) {
        const KvCacheView kv{KvType::kF16, k[l].data(), v[l].data(), blocks, kBlock, kKvHeads,
                             kDim, nullptr, nullptr};
        PagedAttention(ctx, kv, batch, table, q.data(), kHeads, 0.125f, attn.data());
      }
    });
    double layer_bytes = 0.0;
    for (const WeightMatrix& w : layer_ws) layer_bytes += static_cast<double>(w.rows * w.row_bytes);
    const double output_bytes = static_cast<double>(output.rows * output.row_bytes);
    std::printf("%7d %13.2f (%5.1f) %13.2f (%5.1f) %24.1f\n", threads, layers_us / 1e3,
                layer_bytes / layers_us / 1e3, output_us / 1e3, output_bytes / output_us / 1e3,
                attention_us / kLayers);
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) { return tokenmill::Main(argc, argv); }
