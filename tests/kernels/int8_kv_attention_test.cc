// int8 KV: the row quantizer, and the attention kernels reading int8 K/V against float
// attention over the unquantized K/V, within the error the quantization step allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/thread_pool.h"

namespace tokenmill {
namespace {

TEST(QuantizeKvRowInt8Test, RoundTripsWithinHalfAStep) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n : {1, 7, 64, 129}) {
    for (float magnitude : {1e-6f, 0.3f, 1.0f, 250.0f}) {
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng) * magnitude;
      std::vector<int8_t> q(n);
      const float scale = QuantizeKvRowInt8(x.data(), n, q.data());
      float amax = 0.0f;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      EXPECT_EQ(scale, amax / 127.0f);
      const auto largest = std::max_element(
          x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
      EXPECT_EQ(std::abs(q[largest - x.begin()]), 127) << "the largest |x| uses the full range";
      for (int i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(x[i] - q[i] * scale), scale * 0.5f * (1 + 1e-5f))
            << "n=" << n << " magnitude=" << magnitude << " i=" << i;
      }
    }
  }
}

TEST(QuantizeKvRowInt8Test, AZeroRowHasScaleZero) {
  const std::vector<float> x(5, 0.0f);
  std::vector<int8_t> q(5, 9);
  EXPECT_EQ(QuantizeKvRowInt8(x.data(), 5, q.data()), 0.0f);
  EXPECT_EQ(q, std::vector<int8_t>(5, 0));
}

// One sequence prefilling its last `new_tokens` positions over scattered blocks of an
// odd size; K/V rows get different magnitudes per position so the scales differ.
struct Int8Case {
  int head_dim, n_heads, n_kv_heads, block_size, len, new_tokens;
};

class Int8AttentionTest : public ::testing::TestWithParam<Int8Case> {};

TEST_P(Int8AttentionTest, EveryIsaStaysWithinTheQuantizationBound) {
  const Int8Case c = GetParam();
  const int n_blocks = (c.len + c.block_size - 1) / c.block_size;
  const int pool_blocks = n_blocks + 3;
  std::vector<int32_t> indices(pool_blocks);
  std::iota(indices.begin(), indices.end(), 0);
  std::mt19937 rng(c.head_dim * 31 + c.len);
  std::shuffle(indices.begin(), indices.end(), rng);
  indices.resize(n_blocks);
  const std::vector<int32_t> indptr = {0, n_blocks},
                             cu = {0, c.new_tokens},
                             last = {c.len - (n_blocks - 1) * c.block_size};
  std::vector<int32_t> positions;
  std::vector<int64_t> slots;
  for (int p = c.len - c.new_tokens; p < c.len; ++p) {
    positions.push_back(p);
    slots.push_back(int64_t{indices[p / c.block_size]} * c.block_size + p % c.block_size);
  }
  const KvBlockTable table{slots, indptr, indices, last};
  const RaggedBatch batch{positions, cu, {&table, 1}};
  ASSERT_TRUE(ValidateRaggedBatch(batch, c.block_size, pool_blocks).ok());

  // Every slot of the pool gets K/V rows; row magnitudes vary over [0.05, 4].
  const int64_t row = int64_t{c.n_kv_heads} * c.head_dim;
  const int64_t slots_in_pool = int64_t{pool_blocks} * c.block_size;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> magnitude(0.05f, 4.0f);
  std::vector<float> k(slots_in_pool * row), v(k.size());
  for (int64_t r = 0; r < slots_in_pool * c.n_kv_heads; ++r) {
    const float mk = magnitude(rng), mv = magnitude(rng);
    for (int i = 0; i < c.head_dim; ++i) {
      k[r * c.head_dim + i] = normal(rng) * mk;
      v[r * c.head_dim + i] = normal(rng) * mv;
    }
  }
  std::vector<int64_t> all_slots(slots_in_pool);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  const KvCacheView exact{KvType::kF32, k.data(), v.data(), pool_blocks, c.block_size,
                          c.n_kv_heads, c.head_dim};
  std::vector<int8_t> k8(k.size()), v8(v.size());
  std::vector<float> k_scale(slots_in_pool * c.n_kv_heads), v_scale(k_scale.size());
  const KvCacheView int8{KvType::kInt8, k8.data(),    v8.data(),      pool_blocks,
                         c.block_size,  c.n_kv_heads, c.head_dim,     k_scale.data(),
                         v_scale.data()};
  StoreKv(int8, all_slots, k.data(), v.data());

  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> q(c.new_tokens * c.n_heads * c.head_dim);
  for (float& x : q) x = normal(rng);
  std::vector<float> expected(q.size());
  PagedAttentionReference(exact, batch, table, q.data(), c.n_heads, scale, expected.data());

  // Bound per (token, head): a score moves by at most Δ = scale · Σ|q| · max_j s_k(j) / 2,
  // so each probability by a factor within e^{±2Δ}; the output then moves by at most
  // (e^{2Δ} - 1) · max|V'| plus the V error max_j s_v(j) / 2 (s: a row's step, max|x|/127).
  const int group = c.n_heads / c.n_kv_heads;
  std::vector<float> bound(q.size());
  for (int t = 0; t < c.new_tokens; ++t) {
    for (int h = 0; h < c.n_heads; ++h) {
      const int kv_head = h / group;
      double q_abs = 0.0, k_step = 0.0, v_step = 0.0, v_max = 0.0;
      const float* qh = q.data() + (t * c.n_heads + h) * c.head_dim;
      for (int i = 0; i < c.head_dim; ++i) q_abs += std::fabs(qh[i]);
      for (int p = 0; p <= positions[t]; ++p) {
        const int64_t slot = int64_t{indices[p / c.block_size]} * c.block_size + p % c.block_size;
        const int64_t off = slot * row + kv_head * c.head_dim;
        double k_amax = 0.0, v_amax = 0.0;
        for (int i = 0; i < c.head_dim; ++i) {
          k_amax = std::max(k_amax, std::fabs(static_cast<double>(k[off + i])));
          v_amax = std::max(v_amax, std::fabs(static_cast<double>(v[off + i])));
        }
        k_step = std::max(k_step, k_amax / 127);
        v_step = std::max(v_step, v_amax / 127);
        v_max = std::max(v_max, v_amax + v_amax / 254);
      }
      const double delta = scale * q_abs * k_step / 2;
      const double b = (std::exp(2 * delta) - 1) * v_max + v_step / 2 + 1e-5;
      std::fill_n(bound.begin() + (t * c.n_heads + h) * c.head_dim, c.head_dim,
                  static_cast<float>(b));
    }
  }

  ThreadPool pool(2);
  std::vector<float> scalar_out;
  double worst_ratio = 0.0;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    std::vector<float> out(q.size(), NAN);
    PagedAttention(CpuContext{&KernelTable(isa), &pool}, int8, batch, table, q.data(), c.n_heads,
                   scale, out.data());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_LE(std::fabs(out[i] - expected[i]), bound[i]) << IsaName(isa) << " at " << i;
      worst_ratio = std::max<double>(worst_ratio, std::fabs(out[i] - expected[i]) / bound[i]);
    }
    // The ISA paths agree with each other to float rounding (different sum orders).
    if (scalar_out.empty()) {
      scalar_out = out;
    } else {
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], scalar_out[i], 1e-5f * (1 + std::fabs(scalar_out[i])))
            << IsaName(isa) << " vs scalar at " << i;
      }
    }
  }
  // The error is a real quantization error, not zero: the test would see a kernel that
  // ignored the scales or read the wrong rows.
  EXPECT_GT(worst_ratio, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    AwkwardSizes, Int8AttentionTest,
    ::testing::Values(Int8Case{64, 9, 3, 16, 70, 5},   // SmolLM2's heads; SIMD head-64 path
                      Int8Case{13, 4, 2, 5, 23, 23},   // odd head size: vector tails only
                      Int8Case{1, 2, 1, 3, 10, 2},     // head size 1
                      Int8Case{72, 8, 8, 7, 40, 1},    // no GQA; 9 vectors per row; decode
                      Int8Case{48, 6, 2, 1, 33, 4}),   // blocks of one token
    [](const ::testing::TestParamInfo<Int8Case>& param_info) {
      const Int8Case& c = param_info.param;
      std::ostringstream name;
      name << "d" << c.head_dim << "_h" << c.n_heads << "_kv" << c.n_kv_heads << "_bs"
           << c.block_size << "_len" << c.len;
      return name.str();
    });

}  // namespace
}  // namespace tokenmill
