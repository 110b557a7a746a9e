// Quantized matmul cost by number of tokens, on one thread (no pool): the model's matrix
// shapes with random weights, timed by process CPU time (load from other processes on a
// shared machine does not count). Prints per token count the time of one pass over all
// shapes, its ratio to one token, and ns per (row, token, 32-column block).
//
//   build/bin/tokenmill_matmul_bench --type q4_1 --tokens 1,2,4,8,16,32 --reps 20 [--row-groups]
//
// With --rows and --cols, one matrix of that shape instead (256-aligned for the K-quants; make
// it larger than the last-level cache to time a decode that streams its weights from memory),
// and with --threads N a pool of N threads, timed by wall clock (the columns before the last;
// the last is the CPU time of all threads, which a loaded machine inflates less):
//
//   build/bin/tokenmill_matmul_bench --type q4_k --rows 65536 --cols 4096 --threads 2 --tokens 1,16

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/cpu_time.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dequantize_k_quants.h"
#include "kernels/tensor_type.h"

namespace tokenmill {
namespace {

struct Shape {
  int64_t rows, cols;
};

int Main(int argc, char** argv) {
  CLI::App app{"quantized matmul cost by token count"};
  std::string type_name = "q4_1", isa_name;
  std::vector<int> token_counts = {1, 2, 4, 8, 16, 32};
  int reps = 20;
  app.add_option("--type", type_name,
                 "a quantized type: q4_1, q4_0, q8_0, q5_0, q5_1, iq4_nl, q2_k..q6_k, iq4_xs");
  app.add_option("--tokens", token_counts, "token counts")->delimiter(',');
  app.add_option("--reps", reps, "passes per token count (the median is reported)");
  app.add_option("--isa", isa_name, "scalar, avx2 or avx512vnni (default: best)");
  bool row_groups = false;
  app.add_flag("--row-groups", row_groups,
               "Q4_1/Q8_0 regrouped 16 rows at a time, as the model runs them");
  int64_t rows = 0, cols = 0;
  int threads = 1;
  app.add_option("--rows", rows, "one matrix of this many rows (with --cols)");
  app.add_option("--cols", cols, "and this many columns");
  app.add_option("--threads", threads, "threads (more than 1: wall time)");
  CLI11_PARSE(app, argc, argv);
  const std::span<const TensorType> types = AllTensorTypes();
  const auto found = std::find_if(types.begin(), types.end(), [&](TensorType t) {
    return NameOf(t) == type_name && UsesQuantizedActivations(t) && CpuComputesWith(t);
  });
  if (found == types.end()) {
    std::fprintf(stderr, "--type %s: not a quantized type the CPU computes with (%s)\n",
                 type_name.c_str(), CpuTensorTypeNames().c_str());
    return 2;
  }
  const TensorType type = *found;
  CpuIsa isa = BestCpuIsa();
  if (!isa_name.empty()) {
    for (CpuIsa candidate : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
      if (isa_name == IsaName(candidate)) isa = candidate;
    }
  }
  // SmolLM2-135M's layer matrices: q/o, k/v, gate/up, down (their rows are no multiple of
  // 256: the K-quants take 768 and 1536 columns).
  std::vector<Shape> shapes = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}};
  const GgmlTypeLayout& layout = LayoutOf(type);
  if (layout.block_size == 256) shapes = {{576, 768}, {192, 768}, {1536, 768}, {576, 1536}};
  if (rows > 0 && cols > 0) shapes = {{rows, cols}};
  std::mt19937 rng(1);
  std::vector<std::vector<uint8_t>> data, regrouped(shapes.size());
  std::vector<WeightMatrix> ws;
  int64_t blocks_per_token = 0;
  for (const Shape& s : shapes) {
    const int64_t row_bytes = s.cols / layout.block_size * layout.type_size;
    std::vector<uint8_t> d(static_cast<size_t>(s.rows * row_bytes));
    uint32_t bits = rng();
    for (auto& v : d) {  // xorshift: random bytes fast enough for matrices past the cache
      bits ^= bits << 13, bits ^= bits >> 17, bits ^= bits << 5;
      v = static_cast<uint8_t>(bits);
    }
    // Small finite f16 scales (0x2000 ≈ 0.0078) in every block, random bytes elsewhere (the
    // kernels' cost does not depend on the values, but subnormal scales would slow them).
    std::vector<int> f16_fields = {0};
    if (type == TensorType::kQ4_1 || type == TensorType::kQ5_1) f16_fields = {0, 2};
    if (layout.block_size == 256) f16_fields = KQuantF16Offsets(type);
    for (int64_t b = 0; b < s.rows * s.cols / layout.block_size; ++b) {
      uint8_t* block = &d[static_cast<size_t>(b * layout.type_size)];
      if (type == TensorType::kMXFP4) {
        block[0] = 120;  // its E8M0 exponent: 2^-8 (0 would be a float subnormal)
        continue;
      }
      const uint16_t scale = 0x2000;
      for (int at : f16_fields) std::memcpy(block + at, &scale, 2);
    }
    data.push_back(std::move(d));
    ws.push_back({type, data.back().data(), s.rows, s.cols, row_bytes});
    if (row_groups && CanRegroupRows(ws.back())) {
      ws.back() = RegroupRows(ws.back(), regrouped[ws.size() - 1]);
    }
    blocks_per_token += s.rows * s.cols / 32;
  }
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
  const CpuContext ctx{&KernelTable(isa), pool.get()};
  int64_t max_rows = 0, max_cols = 0, weight_bytes = 0;
  for (const WeightMatrix& w : ws) {
    max_rows = std::max(max_rows, w.rows);
    max_cols = std::max(max_cols, w.cols);
    weight_bytes += w.rows * w.row_bytes;
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf("%s%s %s, %d thread(s), %.1f MB of weights\n%6s %12s %10s %16s %10s %14s\n",
              std::string(NameOf(type)).c_str(), row_groups ? " (row groups)" : "",
              std::string(IsaName(isa)).c_str(), threads, 1e-6 * static_cast<double>(weight_bytes),
              "tokens", threads > 1 ? "wall ms/pass" : "cpu ms/pass", "x 1 token",
              "ns/(row·tok·32)", "weight GB/s", "cpu ms (all)");
  double one_token_ms = 0.0;
  for (int tokens : token_counts) {
    std::vector<float> x(static_cast<size_t>(tokens * max_cols));
    for (float& v : x) v = normal(rng);
    std::vector<float> y(static_cast<size_t>(tokens * max_rows));
    std::vector<double> times, cpu_times;
    const auto wall_seconds = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
    for (int rep = 0; rep < reps; ++rep) {
      const double start = wall_seconds(), cpu_start = ProcessCpuSeconds();
      for (const WeightMatrix& w : ws) Matmul(ctx, w, x.data(), tokens, y.data());
      times.push_back(1e3 * (wall_seconds() - start));
      cpu_times.push_back(1e3 * (ProcessCpuSeconds() - cpu_start));
      if (threads == 1) times.back() = cpu_times.back();
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu_times.begin(), cpu_times.end());
    const double ms = times[times.size() / 2];
    if (tokens == token_counts.front()) one_token_ms = ms / tokens;
    std::printf("%6d %12.3f %10.2f %16.3f %10.2f %14.3f\n", tokens, ms, ms / one_token_ms,
                1e6 * ms / (static_cast<double>(tokens) * static_cast<double>(blocks_per_token)),
                1e-6 * static_cast<double>(weight_bytes) / ms, cpu_times[cpu_times.size() / 2]);
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) { return tokenmill::Main(argc, argv); }
