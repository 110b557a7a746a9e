// LoRA's per-element math for the GPU (kernels/cuda/lora_math.h) on the host: the kernels'
// order of operations gives y + scale · B·(A·x) within float rounding of a double-precision
// reference, and a pair of rank 0 leaves y alone.
#include "kernels/cuda/lora_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tokenmill::cuda {
namespace {

// n values of a standard normal distribution.
std::vector<float> Normal(int64_t n, std::mt19937& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  std::generate(v.begin(), v.end(), [&rng] { return std::normal_distribution<float>()(rng); });
  return v;
}

TEST(LoraMath, UpdateIsScaleTimesBOfAOfX) {
  std::mt19937 rng(7);
  // cols not a multiple of the 32 lanes; a rank of adapters as they come (8, 16) and an odd one.
  for (const int32_t rank : {1, 3, 16}) {
    const int64_t cols = 100, rows = 70;
    const std::vector<float> x = Normal(cols, rng), a = Normal(rank * cols, rng),
                             bt = Normal(rank * rows, rng), y0 = Normal(rows, rng);
    const DeviceLoraPair pair{.a = a.data(), .b_transposed = bt.data(), .rank = rank,
                              .scale = 2.0f / static_cast<float>(rank)};
    std::vector<float> y = y0;
    LoraUpdateOnHost(x.data(), pair, cols, rows, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      double update = 0.0;
      for (int32_t k = 0; k < rank; ++k) {
        double mid = 0.0;
        for (int64_t c = 0; c < cols; ++c) mid += double{x[c]} * a[k * cols + c];
        update += mid * bt[k * rows + r];
      }
      const double want = y0[r] + pair.scale * update;
      EXPECT_NEAR(y[r], want, 1e-4 * (1.0 + std::fabs(want))) << "rank " << rank << " row " << r;
    }
  }
}

TEST(LoraMath, RankZeroLeavesTheOutputAlone) {
  std::mt19937 rng(8);
  const std::vector<float> x = Normal(64, rng), y0 = Normal(10, rng);
  std::vector<float> y = y0;
  LoraUpdateOnHost(x.data(), DeviceLoraPair{}, 64, 10, y.data());
  EXPECT_EQ(y, y0);
}

}  // namespace
}  // namespace tokenmill::cuda
