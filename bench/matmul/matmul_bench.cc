// Quantized matmul cost by number of tokens, on one thread (no pool): the model's matrix
// shapes with random weights, timed by process CPU time (load from other processes on a
// shared machine does not count). Prints per token count the time of one pass over all
// shapes, its ratio to one token, and ns per (row, token, 32-column block).
//
//   build/bin/tokenmill_matmul_bench --type q4_1 --tokens 1,2,4,8,16,32 --reps 20 [--row-groups]

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/cpu_time.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/row_groups.h"
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
  app.add_option("--type", type_name, "a quantized type: q4_1, q4_0, q8_0, q5_0, q5_1, iq4_nl");
  app.add_option("--tokens", token_counts, "token counts")->delimiter(',');
  app.add_option("--reps", reps, "passes per token count (the median is reported)");
  app.add_option("--isa", isa_name, "scalar, avx2 or avx512vnni (default: best)");
  bool row_groups = false;
  app.add_flag("--row-groups", row_groups,
               "Q4_1/Q8_0 regrouped 16 rows at a time, as the model runs them");
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
  // SmolLM2-135M's layer matrices: q/o, k/v, gate/up, down.
  const std::vector<Shape> shapes = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}};
  const GgmlTypeLayout& layout = LayoutOf(type);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::vector<uint8_t>> data, regrouped(shapes.size());
  std::vector<WeightMatrix> ws;
  int64_t blocks_per_token = 0;
  for (const Shape& s : shapes) {
    const int64_t row_bytes = s.cols / 32 * layout.type_size;
    std::vector<uint8_t> d(static_cast<size_t>(s.rows * row_bytes));
    for (auto& v : d) v = static_cast<uint8_t>(byte(rng));
    // Small finite f16 scales (0x2000 ≈ 0.0078) at the start of every block.
    for (int64_t b = 0; b < s.rows * s.cols / 32; ++b) {
      const uint16_t scale = 0x2000;
      std::memcpy(&d[static_cast<size_t>(b * layout.type_size)], &scale, 2);
      if (type == TensorType::kQ4_1 || type == TensorType::kQ5_1) {  // and the f16 minimum
        std::memcpy(&d[static_cast<size_t>(b * layout.type_size + 2)], &scale, 2);
      }
    }
    data.push_back(std::move(d));
    ws.push_back({type, data.back().data(), s.rows, s.cols, row_bytes});
    if (row_groups && CanRegroupRows(ws.back())) {
      ws.back() = RegroupRows(ws.back(), regrouped[ws.size() - 1]);
    }
    blocks_per_token += s.rows * s.cols / 32;
  }
  const CpuContext ctx{&KernelTable(isa), nullptr};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf("%s%s %s, one thread\n%6s %12s %10s %16s\n", std::string(NameOf(type)).c_str(),
              row_groups ? " (row groups)" : "", std::string(IsaName(isa)).c_str(), "tokens",
              "cpu ms/pass", "x 1 token",
              "ns/(row·tok·blk)");
  double one_token_ms = 0.0;
  for (int tokens : token_counts) {
    std::vector<float> x(static_cast<size_t>(tokens) * 1536);
    for (float& v : x) v = normal(rng);
    std::vector<float> y(static_cast<size_t>(tokens) * 1536);
    std::vector<double> times;
    for (int rep = 0; rep < reps; ++rep) {
      const double start = ProcessCpuSeconds();
      for (const WeightMatrix& w : ws) Matmul(ctx, w, x.data(), tokens, y.data());
      times.push_back(1e3 * (ProcessCpuSeconds() - start));
    }
    std::sort(times.begin(), times.end());
    const double ms = times[times.size() / 2];
    if (tokens == token_counts.front()) one_token_ms = ms / tokens;
    std::printf("%6d %12.3f %10.2f %16.3f\n", tokens, ms, ms / one_token_ms,
                1e6 * ms / (static_cast<double>(tokens) * static_cast<double>(blocks_per_token)));
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) { return tokenmill::Main(argc, argv); }
