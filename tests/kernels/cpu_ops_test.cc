// Attention, RoPE, RMSNorm and the thread pool against plain references.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/half.h"

namespace tokenmill {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// Two sequences in scattered blocks: one prefilling 13 new tokens after 6 cached ones,
// one decoding its 21st token. GQA: 6 query heads over 2 KV heads.
struct AttentionSetup {
  static constexpr int kBlockSize = 4, kHeads = 6, kKvHeads = 2;
  int head_dim = 20;
  std::vector<int32_t> positions, cu_seqlens = {0, 13, 14}, kv_indptr = {0, 5, 11},
                                  kv_indices = {7, 2, 9, 0, 4, 1, 3, 10, 5, 8, 6},
                                  last_len = {3, 1};
  std::vector<int64_t> slots;
  KvBlockTable table;
  explicit AttentionSetup(int dim = 20) : head_dim(dim) {
    for (int p = 6; p < 19; ++p) positions.push_back(p);
    positions.push_back(20);
    for (size_t t = 0; t < positions.size(); ++t) {
      const int s = t < 13 ? 0 : 1;
      const int32_t pos = positions[t];
      slots.push_back(int64_t{kv_indices[kv_indptr[s] + pos / kBlockSize]} * kBlockSize +
                      pos % kBlockSize);
    }
    table = {slots, kv_indptr, kv_indices, last_len};
  }
  AttentionSetup(const AttentionSetup&) = delete;  // `table` points into the vectors
  RaggedBatch batch() const { return {positions, cu_seqlens, {&table, 1}}; }
};

// A paged KV layer of `blocks` blocks whose every slot holds random K/V (the "cached prefix"):
// K of `type`, V of v_type (`type` unless given).
struct RandomKvCache {
  std::vector<uint8_t> k_mem, v_mem;
  std::vector<uint8_t> k_scale, v_scale;
  KvCacheView layer;
  RandomKvCache(KvType type, int blocks, int block_size, int kv_heads, int head_dim,
                std::mt19937& rng, std::optional<KvType> v_type = std::nullopt)
      : k_mem(size_t(blocks) * block_size * kv_heads * KvRowBytes(type, head_dim)),
        v_mem(size_t(blocks) * block_size * kv_heads *
              KvRowBytes(v_type.value_or(type), head_dim)),
        k_scale(size_t(blocks) * block_size * kv_heads * KvRowScaleBytes(type, head_dim)),
        v_scale(size_t(blocks) * block_size * kv_heads *
                KvRowScaleBytes(v_type.value_or(type), head_dim)),
        layer{.type = type,
              .k = k_mem.data(),
              .v = v_mem.data(),
              .num_blocks = blocks,
              .block_size = block_size,
              .n_kv_heads = kv_heads,
              .head_dim = head_dim,
              .k_scale = k_scale.empty() ? nullptr : k_scale.data(),
              .v_scale = v_scale.empty() ? nullptr : v_scale.data(),
              .v_type = v_type.value_or(type)} {
    const size_t elements = size_t(blocks) * block_size * kv_heads * head_dim;
    std::vector<int64_t> all_slots(size_t(blocks) * block_size);
    std::iota(all_slots.begin(), all_slots.end(), 0);
    StoreKv(layer, all_slots, Random(elements, rng).data(), Random(elements, rng).data());
  }
  RandomKvCache(const RandomKvCache&) = delete;  // `layer` points into the vectors
};

// PagedAttention of every ISA over K of k_type and V of v_type with heads of head_dim equals
// PagedAttentionReference.
void ExpectEveryIsaMatchesTheReference(KvType k_type, KvType v_type, int head_dim) {
  AttentionSetup s(head_dim);  // 64 takes the SIMD head-size-64 path
  ASSERT_TRUE(ValidateRaggedBatch(s.batch(), s.kBlockSize, 11).ok());
  std::mt19937 rng(5);
  const RandomKvCache cache(k_type, 11, s.kBlockSize, s.kKvHeads, s.head_dim, rng, v_type);
  const KvCacheView& kv = cache.layer;
  const std::vector<float> q = Random(14 * s.kHeads * s.head_dim, rng);
  std::vector<float> expected(q.size());
  PagedAttentionReference(kv, s.batch(), s.table, q.data(), s.kHeads, 0.2f, expected.data());
  ThreadPool pool(2);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    std::vector<float> out(q.size(), NAN);
    PagedAttention(CpuContext{&KernelTable(isa), &pool}, kv, s.batch(), s.table, q.data(),
                   s.kHeads, 0.2f, out.data());
    // With f16 K/V the probabilities are rounded to f16; float vs double softmax can round
    // one of them to the neighbouring f16 value.
    const bool f16 = k_type == KvType::kF16 || v_type == KvType::kF16;
    const float tolerance = f16 ? 5e-4f : 1e-5f;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], expected[i], tolerance) << IsaName(isa) << " at " << i;
    }
  }
}

class PagedAttentionTest : public ::testing::TestWithParam<std::tuple<KvType, int>> {};

TEST_P(PagedAttentionTest, EveryIsaMatchesTheReference) {
  const KvType kv_type = std::get<0>(GetParam());
  ExpectEveryIsaMatchesTheReference(kv_type, kv_type, std::get<1>(GetParam()));
}

// K and V of different types (--kv-cache-dtype-v): each side read, and rotated, by its own.
TEST(PagedAttentionMixedTest, EveryIsaMatchesTheReferenceForKAndVApart) {
  const std::tuple<KvType, KvType, int> cases[] = {
      {KvType::kInt8, KvType::kQ4_0, 64},  {KvType::kInt8, KvType::kQ4_0, 128},
      {KvType::kF16, KvType::kQ4_0, 64},   {KvType::kF16, KvType::kInt8, 64},
      {KvType::kInt8, KvType::kF16, 64},   {KvType::kQ4_0, KvType::kF16, 128},
      {KvType::kInt4, KvType::kInt8, 64},  {KvType::kF16, KvType::kInt4, 32},
      {KvType::kF32, KvType::kQ4_0, 64},   {KvType::kInt8, KvType::kInt4, 64}};
  for (const auto& [k_type, v_type, head_dim] : cases) {
    SCOPED_TRACE(std::string(KvTypeName(k_type)) + " K, " + std::string(KvTypeName(v_type)) +
                 " V, d " + std::to_string(head_dim));
    ExpectEveryIsaMatchesTheReference(k_type, v_type, head_dim);
  }
}

INSTANTIATE_TEST_SUITE_P(
    KvTypesAndHeadSizes, PagedAttentionTest,
    ::testing::Combine(::testing::Values(KvType::kF16, KvType::kF32, KvType::kInt8),
                       ::testing::Values(20, 64)),
    [](const ::testing::TestParamInfo<std::tuple<KvType, int>>& param_info) {
      return std::string(KvTypeName(std::get<0>(param_info.param))) + "_d" +
             std::to_string(std::get<1>(param_info.param));
    });

// The 4-bit types need heads of whole blocks of 32 (64 and 128 rotate, 32 does not).
INSTANTIATE_TEST_SUITE_P(
    FourBit, PagedAttentionTest,
    ::testing::Combine(::testing::Values(KvType::kQ4_0, KvType::kInt4),
                       ::testing::Values(32, 64, 128)),
    [](const ::testing::TestParamInfo<std::tuple<KvType, int>>& param_info) {
      return std::string(KvTypeName(std::get<0>(param_info.param))) + "_d" +
             std::to_string(std::get<1>(param_info.param));
    });

// Each group of 32 spans its min to its max in 16 steps: every value within half a step
// (plus the f16 rounding of its zero) of its code's, a constant group exact up to f16.
TEST(KvInt4Test, CodesSpanEachGroupWithinHalfAStep) {
  std::mt19937 rng(21);
  std::vector<float> x = Random(4 * 32, rng);
  for (int i = 0; i < 32; ++i) x[32 + i] = 100.0f * x[32 + i] + 7.0f;  // offset, wide
  std::fill(x.begin() + 64, x.begin() + 96, -0.3f);                   // constant
  std::vector<uint8_t> codes(x.size() / 2);
  std::vector<uint16_t> pairs(x.size() / 32 * 2);
  QuantizeKvRowInt4(x.data(), std::ssize(x), codes.data(), pairs.data());
  for (size_t g = 0; g < x.size() / 32; ++g) {
    const float scale = HalfToFloat(pairs[2 * g]), zero = HalfToFloat(pairs[2 * g + 1]);
    const auto [lo, hi] = std::minmax_element(x.begin() + 32 * g, x.begin() + 32 * (g + 1));
    EXPECT_NEAR(zero, *lo, std::fabs(*lo) * 1e-3f) << "group " << g;
    for (size_t j = 0; j < 32; ++j) {
      const uint8_t byte = codes[16 * g + j % 16];
      const int code = j < 16 ? byte & 15 : byte >> 4;
      const float value = static_cast<float>(code) * scale + zero;
      EXPECT_LE(std::fabs(value - x[32 * g + j]), scale / 2 + std::fabs(*lo) * 1e-3f + 1e-6f)
          << "group " << g << " value " << j;
      if (x[32 * g + j] == *hi && scale > 0.0f) {
        EXPECT_EQ(code, 15) << "group " << g;
      }
    }
  }
}

// Against the matrix llama.cpp builds (ggml_gen_hadamard: H_1 = 1 / sqrt(n), each doubling
// [[H, H], [H, -H]]), multiplied out in double; and H · H = I.
TEST(KvRotationTest, HadamardRotateIsLlamaCppsMatrixAndItsOwnInverse) {
  for (int n : {64, 128, 256}) {
    std::vector<double> h(static_cast<size_t>(n) * n);
    h[0] = 1.0 / std::sqrt(static_cast<double>(n));
    for (int s = 1; s < n; s *= 2) {
      for (int i = 0; i < s; ++i) {
        for (int j = 0; j < s; ++j) {
          const double v = h[i * n + j];
          h[(i + s) * n + j] = v;
          h[i * n + j + s] = v;
          h[(i + s) * n + j + s] = -v;
        }
      }
    }
    std::mt19937 rng(n);
    const std::vector<float> x = Random(2 * n, rng);  // two blocks
    std::vector<float> y = x;
    HadamardRotate(y.data(), 2 * n, n);
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < n; ++i) {
        double expected = 0.0;
        for (int j = 0; j < n; ++j) expected += h[i * n + j] * x[b * n + j];
        ASSERT_NEAR(y[b * n + i], expected, 1e-5) << "n " << n << " row " << i;
      }
    }
    HadamardRotate(y.data(), 2 * n, n);
    for (int i = 0; i < 2 * n; ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << "n " << n;
  }
}

// As llama.cpp's llama_kv_cache: keys by the largest power-of-two block of 64 or more
// dividing the head, values by 64, nothing for heads not of whole 64s or unquantized types.
TEST(KvRotationTest, BlocksFollowTheHeadSize) {
  EXPECT_EQ(KvRotationOf(KvType::kQ4_0, 64).keys, 64);
  EXPECT_EQ(KvRotationOf(KvType::kQ4_0, 128).keys, 128);
  EXPECT_EQ(KvRotationOf(KvType::kQ4_0, 256).keys, 256);
  EXPECT_EQ(KvRotationOf(KvType::kQ4_0, 192).keys, 64);
  EXPECT_EQ(KvRotationOf(KvType::kQ4_0, 256).values, 64);
  EXPECT_EQ(KvRotationOf(KvType::kQ4_0, 96).keys, 0);
  EXPECT_EQ(KvRotationOf(KvType::kQ4_0, 32).values, 0);
  EXPECT_EQ(KvRotationOf(KvType::kInt8, 128).keys, 0);
  EXPECT_EQ(KvRotationOf(KvType::kF16, 128).values, 0);
}

// Makes the K and V of `slot` NaN, so that any read of it shows in the output.
void PoisonSlot(const KvCacheView& kv, int64_t slot) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  for (int64_t i = slot * row; i < (slot + 1) * row; ++i) {
    switch (kv.type) {
      case KvType::kF16:
        static_cast<uint16_t*>(kv.k)[i] = static_cast<uint16_t*>(kv.v)[i] = 0x7e00;
        break;
      case KvType::kF32: static_cast<float*>(kv.k)[i] = static_cast<float*>(kv.v)[i] = NAN; break;
      default: break;
    }
  }
  if (kv.type == KvType::kInt8) {
    auto* k_scale = static_cast<float*>(kv.k_scale);
    auto* v_scale = static_cast<float*>(kv.v_scale);
    for (int h = 0; h < kv.n_kv_heads; ++h) {
      k_scale[slot * kv.n_kv_heads + h] = v_scale[slot * kv.n_kv_heads + h] = NAN;
    }
  }
  if (kv.type == KvType::kQ4_0) {  // every block's f16 scale a NaN
    for (int64_t b = slot * row / kKvQ4Block; b < (slot + 1) * row / kKvQ4Block; ++b) {
      static_cast<uint16_t*>(kv.k_scale)[b] = static_cast<uint16_t*>(kv.v_scale)[b] = 0x7e00;
    }
  }
}

TEST_P(PagedAttentionTest, SlidingWindowAndSoftcapMatchTheReferenceReadingOnlyTheWindow) {
  const KvType kv_type = std::get<0>(GetParam());
  AttentionSetup s(std::get<1>(GetParam()));
  std::mt19937 rng(6);
  const RandomKvCache cache(kv_type, 11, s.kBlockSize, s.kKvHeads, s.head_dim, rng);
  const KvCacheView& kv = cache.layer;
  const std::vector<float> q = Random(14 * s.kHeads * s.head_dim, rng);
  // A window of 5: sequence 0's tokens (positions 6 to 18) see from position 2 on, sequence
  // 1's (position 20) from 16 on. A cap of 1 bites on scores of a few units.
  const AttentionVariant variant{.softcap = 1.0f, .sliding_window = 5, .sinks = {}};
  std::vector<float> expected(q.size());
  PagedAttentionReference(kv, s.batch(), s.table, q.data(), s.kHeads, 0.2f, expected.data(),
                          variant);
  std::vector<float> unwindowed(q.size());
  PagedAttentionReference(kv, s.batch(), s.table, q.data(), s.kHeads, 0.2f, unwindowed.data());
  EXPECT_NE(expected, unwindowed);
  // Every position before its sequence's first visible one is NaN from here on.
  const int32_t first_visible[] = {2, 16};
  for (int seq = 0; seq < 2; ++seq) {
    for (int32_t pos = 0; pos < first_visible[seq]; ++pos) {
      PoisonSlot(kv, int64_t{s.kv_indices[s.kv_indptr[seq] + pos / s.kBlockSize]} *
                             s.kBlockSize + pos % s.kBlockSize);
    }
  }
  ThreadPool pool(2);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    std::vector<float> out(q.size(), NAN);
    PagedAttention(CpuContext{&KernelTable(isa), &pool}, kv, s.batch(), s.table, q.data(),
                   s.kHeads, 0.2f, out.data(), variant);
    const float tolerance = kv_type == KvType::kF16 ? 5e-4f : 1e-5f;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], expected[i], tolerance) << IsaName(isa) << " at " << i;
    }
  }
}

TEST_P(PagedAttentionTest, SinksMatchTheReference) {
  const KvType kv_type = std::get<0>(GetParam());
  AttentionSetup s(std::get<1>(GetParam()));
  std::mt19937 rng(7);
  const RandomKvCache cache(kv_type, 11, s.kBlockSize, s.kKvHeads, s.head_dim, rng);
  const std::vector<float> q = Random(14 * s.kHeads * s.head_dim, rng);
  // One logit per query head: below, among and far above the scores (that head's outputs
  // shrink towards 0), in a sliding window and not.
  std::vector<float> sinks(static_cast<size_t>(s.kHeads));
  for (size_t h = 0; h < sinks.size(); ++h) sinks[h] = -3.0f + 2.5f * static_cast<float>(h);
  ThreadPool pool(2);
  for (int32_t window : {0, 5}) {
    const AttentionVariant variant{.softcap = 0.0f, .sliding_window = window, .sinks = sinks};
    std::vector<float> expected(q.size()), sinkless(q.size());
    PagedAttentionReference(cache.layer, s.batch(), s.table, q.data(), s.kHeads, 0.2f,
                            expected.data(), variant);
    PagedAttentionReference(cache.layer, s.batch(), s.table, q.data(), s.kHeads, 0.2f,
                            sinkless.data(),
                            AttentionVariant{.softcap = 0.0f, .sliding_window = window, .sinks = {}});
    EXPECT_NE(expected, sinkless);
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
      if (!CpuSupports(isa)) continue;
      std::vector<float> out(q.size(), NAN);
      PagedAttention(CpuContext{&KernelTable(isa), &pool}, cache.layer, s.batch(), s.table,
                     q.data(), s.kHeads, 0.2f, out.data(), variant);
      const float tolerance = kv_type == KvType::kF16 ? 5e-4f : 1e-5f;
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], expected[i], tolerance) << IsaName(isa) << " window " << window
                                                    << " at " << i;
      }
    }
  }
}

TEST(PagedAttentionTest, ADecodeTokenAloneEqualsItselfInABatchBitForBit) {
  // Alone, the token's GQA groups are the only units of the pool's job; in the batch they
  // fall in other chunks and threads. The sums must not change (docs/design.md, Determinism).
  for (KvType kv_type : {KvType::kF16, KvType::kF32, KvType::kInt8}) {
    AttentionSetup s(64);
    std::mt19937 rng(9);
    const RandomKvCache cache(kv_type, 11, s.kBlockSize, s.kKvHeads, s.head_dim, rng);
    const KvCacheView& kv = cache.layer;
    const int64_t q_row = s.kHeads * s.head_dim;
    const std::vector<float> q = Random(14 * q_row, rng);
    ThreadPool pool(2);
    const CpuContext ctx{&KernelTable(BestCpuIsa()), &pool};
    std::vector<float> batch_out(q.size());
    PagedAttention(ctx, kv, s.batch(), s.table, q.data(), s.kHeads, 0.2f, batch_out.data());
    // The decode token (the batch's last) alone: sequence 1's blocks, position 20.
    const std::vector<int32_t> positions = {20}, cu_seqlens = {0, 1}, kv_indptr = {0, 6},
                               kv_indices(s.kv_indices.begin() + 5, s.kv_indices.end()),
                               last_len = {1};
    const std::vector<int64_t> slots = {s.slots.back()};
    const KvBlockTable alone_table{slots, kv_indptr, kv_indices, last_len};
    const RaggedBatch alone{positions, cu_seqlens, {&alone_table, 1}};
    ASSERT_TRUE(ValidateRaggedBatch(alone, s.kBlockSize, 11).ok());
    std::vector<float> alone_out(static_cast<size_t>(q_row));
    PagedAttention(ctx, kv, alone, alone_table, q.data() + 13 * q_row, s.kHeads, 0.2f,
                   alone_out.data());
    for (int64_t i = 0; i < q_row; ++i) {
      ASSERT_EQ(alone_out[i], batch_out[13 * q_row + i]) << KvTypeName(kv_type) << " at " << i;
    }
  }
}

// ggml_vec_dot_f16's sum (AVX2): element i in lane i mod 32 by fused multiply-adds, the
// lanes added as (l + 16 + l) + (8 + l + 24 + l) for l < 8, then halves, then pairs.
float GgmlDotOrder(const std::vector<float>& a, const std::vector<float>& b) {
  float lane[32] = {};
  for (size_t i = 0; i < a.size(); ++i) lane[i % 32] = std::fma(a[i], b[i], lane[i % 32]);
  float x[8];
  for (int l = 0; l < 8; ++l) x[l] = (lane[l] + lane[16 + l]) + (lane[8 + l] + lane[24 + l]);
  const float h0 = x[0] + x[4], h1 = x[1] + x[5], h2 = x[2] + x[6], h3 = x[3] + x[7];
  return (h0 + h1) + (h2 + h3);
}

struct GqaShape {
  int heads, kv_heads, dim;
};

class F16AttentionOrderTest : public ::testing::TestWithParam<GqaShape> {};

// Tokens at positions [kLen - chunk, kLen) of one sequence over kLen positions in scattered
// blocks (more than 32, so each V lane sums several), attending causally (within `window`
// positions, 0: all) with or without a sink logit per head: each ISA's output equals
// llama.cpp's sums, computed here token by token and head by head, bit for bit. GQA groups of
// 1 to 7 heads, split into passes and joined with other tokens' heads into runs by the SIMD
// tables (up to 3 heads a pass on AVX2, 12 on AVX-512).
void ExpectLlamaCppsF16Order(const GqaShape& shape, int chunk, int32_t window, bool sinks) {
  const auto [kHeads, kKvHeads, kDim] = shape;
  constexpr int kBlock = 4, kBlocks = 19, kLen = 75;
  std::vector<int32_t> blocks(kBlocks);
  for (int b = 0; b < kBlocks; ++b) blocks[b] = (b * 7) % kBlocks;
  auto slot_of = [&](int pos) { return int64_t{blocks[pos / kBlock]} * kBlock + pos % kBlock; };
  std::vector<int32_t> positions;
  std::vector<int64_t> slots;
  for (int pos = kLen - chunk; pos < kLen; ++pos) {
    positions.push_back(pos);
    slots.push_back(slot_of(pos));
  }
  const std::vector<int32_t> cu_seqlens = {0, chunk}, kv_indptr = {0, kBlocks},
                             last_len = {kLen - (kBlocks - 1) * kBlock};
  const KvBlockTable table{slots, kv_indptr, blocks, last_len};
  const RaggedBatch batch{positions, cu_seqlens, {&table, 1}};
  ASSERT_TRUE(ValidateRaggedBatch(batch, kBlock, kBlocks).ok());
  std::mt19937 rng(17);
  const int64_t row = kKvHeads * kDim, elements = int64_t{kBlocks} * kBlock * row;
  std::vector<uint16_t> k(elements), v(elements);
  const KvCacheView kv{KvType::kF16, k.data(), v.data(), kBlocks, kBlock, kKvHeads, kDim,
                        nullptr, nullptr};
  std::vector<int64_t> all_slots(kBlocks * kBlock);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  StoreKv(kv, all_slots, Random(elements, rng).data(), Random(elements, rng).data());
  const std::vector<float> q = Random(chunk * kHeads * kDim, rng);
  std::vector<float> sink_logits;
  for (int h = 0; sinks && h < kHeads; ++h) sink_logits.push_back(-2.0f + 0.5f * h);
  const AttentionVariant variant{.softcap = 0.0f, .sliding_window = window, .sinks = sink_logits};
  const float scale = 0.125f;
  auto kv_at = [&](const std::vector<uint16_t>& m, int pos, int kv_head, int i) {
    return HalfToFloat(m[(slot_of(pos) * kKvHeads + kv_head) * kDim + i]);
  };
  std::vector<float> expected(q.size());
  for (int t = 0; t < chunk; ++t) {
    const int pos = positions[t], begin = window > 0 ? std::max(0, pos - window + 1) : 0;
    for (int h = 0; h < kHeads; ++h) {
      const int kv_head = h / (kHeads / kKvHeads);
      const float* qt = q.data() + (t * kHeads + h) * kDim;
      std::vector<float> qh(kDim), p(pos + 1, -INFINITY);
      for (int i = 0; i < kDim; ++i) qh[i] = HalfToFloat(FloatToHalf(qt[i]));
      for (int j = begin; j <= pos; ++j) {
        std::vector<float> kj(kDim);
        for (int i = 0; i < kDim; ++i) kj[i] = kv_at(k, j, kv_head, i);
        p[j] = GgmlDotOrder(kj, qh) * scale;
      }
      // llama.cpp's row softmax (elementwise.h; covered by the goldens), masked positions
      // -inf, then 0 in the sums
      SoftmaxLikeGgml(CpuContext{&KernelTable(CpuIsa::kScalar)}, p,
                      sinks ? sink_logits[h] : -INFINITY);
      for (float& x : p) x = HalfToFloat(FloatToHalf(x));
      for (int i = 0; i < kDim; ++i) {
        std::vector<float> vi(pos + 1);  // V transposed, as llama.cpp stores it
        for (int j = 0; j <= pos; ++j) vi[j] = kv_at(v, j, kv_head, i);
        expected[(t * kHeads + h) * kDim + i] = GgmlDotOrder(p, vi);
      }
    }
  }
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
      if (!CpuSupports(isa)) continue;
      std::vector<float> out(expected.size(), NAN);
      PagedAttention(CpuContext{&KernelTable(isa), &pool}, kv, batch, table, q.data(), kHeads,
                     scale, out.data(), variant);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], expected[i]) << IsaName(isa) << " " << threads << " threads at " << i;
      }
    }
  }
}

TEST_P(F16AttentionOrderTest, DecodeIsLlamaCppsOrderBitForBit) {
  ExpectLlamaCppsF16Order(GetParam(), 1, 0, false);
}

// A prefill chunk's tokens each attend as they would alone, whatever run or pass their heads
// share: causal (each its own length), in a sliding window (each its own start) and with
// sinks.
TEST_P(F16AttentionOrderTest, PrefillChunkIsLlamaCppsOrderBitForBit) {
  for (const auto& [window, sinks] : {std::pair{0, false}, {40, false}, {9, true}}) {
    SCOPED_TRACE("window " + std::to_string(window) + (sinks ? " with sinks" : ""));
    ExpectLlamaCppsF16Order(GetParam(), 13, window, sinks);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, F16AttentionOrderTest,
    ::testing::Values(GqaShape{9, 3, 64},    // SmolLM2
                      GqaShape{8, 2, 64},    // Llama 3's group of 4
                      GqaShape{10, 2, 64},   // 5
                      GqaShape{12, 2, 128},  // Qwen2.5-1.5B's 6
                      GqaShape{14, 2, 32},   // Qwen2.5-7B's 7
                      GqaShape{6, 3, 128},   // 2: 6 tokens a run on AVX-512
                      GqaShape{4, 4, 32}),   // 1 (no GQA): 3 tokens a run on AVX2, 8 on AVX-512
    [](const ::testing::TestParamInfo<GqaShape>& param_info) {
      const GqaShape& g = param_info.param;
      return "h" + std::to_string(g.heads) + "_kv" + std::to_string(g.kv_heads) + "_d" +
             std::to_string(g.dim);
    });

TEST(PagedAttentionTest, TheReferenceAttendsCausallyOverTheSequenceOnly) {
  // One KV head, head size 1, K = 0 everywhere: uniform attention, so the output is the
  // mean of V over positions 0..pos of the token's own sequence.
  const std::vector<int32_t> positions = {0, 1, 2, 0}, cu = {0, 3, 4}, indptr = {0, 1, 2},
                             indices = {1, 0}, last = {3, 1};
  const std::vector<int64_t> slots = {4, 5, 6, 0};
  std::vector<float> k(8, 0.0f), v = {100, 100, 100, 100, 1, 2, 6, 100};
  const KvCacheView kv{KvType::kF32, k.data(), v.data(), 2, 4, 1, 1};
  const KvBlockTable table{slots, indptr, indices, last};
  const RaggedBatch batch{positions, cu, {&table, 1}};
  ASSERT_TRUE(ValidateRaggedBatch(batch, 4, 2).ok());
  const std::vector<float> q = {1, 1, 1, 1};
  std::vector<float> out(4);
  PagedAttentionReference(kv, batch, table, q.data(), 1, 1.0f, out.data());
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 1.5f);
  EXPECT_FLOAT_EQ(out[2], 3.0f);
  EXPECT_FLOAT_EQ(out[3], 100.0f);
}

TEST(PagedAttentionTest, ValidationNamesTheProblem) {
  AttentionSetup s;
  s.slots[3] += 1;
  const Status wrong_slot = ValidateRaggedBatch(s.batch(), s.kBlockSize, 11);
  EXPECT_NE(wrong_slot.message().find("slot"), std::string::npos) << wrong_slot.ToString();
  AttentionSetup t;
  const Status small_pool = ValidateRaggedBatch(t.batch(), t.kBlockSize, 10);
  EXPECT_NE(small_pool.message().find("block id 10"), std::string::npos) << small_pool.ToString();
  AttentionSetup u;
  u.positions[13] = 21;
  EXPECT_FALSE(ValidateRaggedBatch(u.batch(), u.kBlockSize, 11).ok());
}

TEST(RopeTest, RotatesPairsByPositionTimesFrequency) {
  // head_dim 4: adjacent pairs (0,1), (2,3) vs NeoX pairs (0,2), (1,3); base 100.
  const std::vector<int32_t> positions = {3};
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
    std::vector<float> x = {1, 2, 3, 4};
    ApplyRope(RopeParams{style, 4, 4, 100.0f, 1.0f, {}}, positions, 1, x.data());
    const double t0 = 3.0, t1 = 3.0 / 10.0;  // 100^(-0/4), 100^(-2/4)
    const int a0 = 0, b0 = style == RopeStyle::kNeox ? 2 : 1;
    const int a1 = style == RopeStyle::kNeox ? 1 : 2, b1 = 3;
    const std::vector<float> in = {1, 2, 3, 4};
    EXPECT_NEAR(x[a0], in[a0] * std::cos(t0) - in[b0] * std::sin(t0), 1e-5);
    EXPECT_NEAR(x[b0], in[a0] * std::sin(t0) + in[b0] * std::cos(t0), 1e-5);
    EXPECT_NEAR(x[a1], in[a1] * std::cos(t1) - in[b1] * std::sin(t1), 1e-5);
    EXPECT_NEAR(x[b1], in[a1] * std::sin(t1) + in[b1] * std::cos(t1), 1e-5);
  }
}

TEST(RmsNormTest, NormalizesEachRow) {
  const std::vector<float> x = {3, 4, 0, 0, 1, 1};
  const std::vector<float> w = {1, 2, 3};
  std::vector<float> out(6);
  RmsNorm(x.data(), w, 0.0f, 2, out.data());
  const float r0 = std::sqrt(25.0f / 3), r1 = std::sqrt(2.0f / 3);
  EXPECT_NEAR(out[0], 3 / r0, 1e-6);
  EXPECT_NEAR(out[1], 8 / r0, 1e-6);
  EXPECT_NEAR(out[5], 3 / r1, 1e-6);
}

TEST(SwiGluTest, IsSiluOfGateTimesUp) {
  const std::vector<float> gate = {-3.0f, 0.0f, 0.5f, 4.0f}, up = {2.0f, 5.0f, -1.0f, 0.25f};
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    std::vector<float> out(4);
    SwiGlu(CpuContext{&KernelTable(isa)}, gate.data(), up.data(), 4, out.data());
    for (int i = 0; i < 4; ++i) {
      const double silu = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i])));
      EXPECT_NEAR(out[i], silu * up[i], 1e-6) << IsaName(isa) << " " << i;
    }
  }
}

// Every ISA's SwiGlu against the scalar table's plain loops, bit for bit: rows with and without
// a tail past the last full 8, gates out to where e^-g leaves float's normal range.
TEST(SwiGluTest, EveryIsaEqualsThePlainLoopsBitForBit) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> wide(-200.0f, 200.0f);
  for (const int64_t n : {1536, 576, 64, 13}) {
    const int64_t rows = 5;
    std::vector<float> gate(static_cast<size_t>(rows * n)), up(gate.size());
    for (size_t i = 0; i < gate.size(); ++i) {
      gate[i] = i % 5 == 0 ? wide(rng) : normal(rng);
      up[i] = normal(rng);
    }
    std::vector<float> expected(gate.size());
    SwiGlu(CpuContext{&KernelTable(CpuIsa::kScalar)}, gate.data(), up.data(), rows, n,
           expected.data());
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
      if (!CpuSupports(isa)) continue;
      std::vector<float> out(gate.size(), NAN);
      SwiGlu(CpuContext{&KernelTable(isa)}, gate.data(), up.data(), rows, n, out.data());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected[i]))
            << IsaName(isa) << " n " << n << " at " << i << " gate " << gate[i];
      }
    }
  }
}

// Every ISA's GeluTanhGlu against the plain loop (ggml's table), bit for bit: every f16 value
// as a gate (the whole table, ±10 and beyond, infinities), values between f16s (rounding to
// nearest even) and a tail past the last full 8. NaN gates give NaN either way.
TEST(GeluTanhGluTest, EveryIsaEqualsThePlainLoopBitForBit) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> gate;
  for (uint32_t h = 0; h < 1 << 16; ++h) gate.push_back(HalfToFloat(static_cast<uint16_t>(h)));
  for (int i = 0; i < 20000; ++i) gate.push_back(i % 2 == 0 ? wide(rng) : normal(rng));
  gate.push_back(-10.0f);
  gate.push_back(10.0f);
  gate.push_back(1.0f);  // 65536 + 20003: a tail of 3
  std::vector<float> up(gate.size());
  for (float& u : up) u = normal(rng);
  const auto n = static_cast<int64_t>(gate.size());
  std::vector<float> expected(gate.size());
  GeluTanhGlu(gate.data(), up.data(), n, expected.data());
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!CpuSupports(isa)) continue;
    std::vector<float> out(gate.size(), -1.0f);
    GeluTanhGlu(CpuContext{&KernelTable(isa)}, gate.data(), up.data(), n, out.data());
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::isnan(expected[i])) {
        ASSERT_TRUE(std::isnan(out[i])) << IsaName(isa) << " gate " << gate[i];
        continue;
      }
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected[i]))
          << IsaName(isa) << " at " << i << " gate " << gate[i] << " up " << up[i];
    }
  }
}

// LoRA's B·(A·x) with B transposed (AddLowRank): the sum, every ISA bit for bit equal to the
// scalar table's, and each row's result the same whether its tokens run alone or together.
TEST(AddLowRankTest, AddsTheRankTermsAlikeOnEveryIsaAndAloneOrTogether) {
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t kTokens = 5, kRank = 16;
  for (const int64_t n : {8960, 576, 37}) {
    std::vector<float> coeffs(kTokens * kRank), bt(static_cast<size_t>(kRank * n));
    std::vector<float> y0(static_cast<size_t>(kTokens * n));
    for (float& v : coeffs) v = normal(rng);
    for (float& v : bt) v = normal(rng);
    for (float& v : y0) v = normal(rng);
    const auto run = [&](CpuIsa isa, bool alone) {
      std::vector<float> y = y0;
      std::vector<float*> rows;
      for (int64_t t = 0; t < kTokens; ++t) rows.push_back(y.data() + t * n);
      const CpuContext ctx{&KernelTable(isa)};
      if (alone) {
        for (int64_t t = 0; t < kTokens; ++t) {
          AddLowRank(ctx, coeffs.data() + t * kRank, 1, kRank, bt.data(), n, &rows[t]);
        }
      } else {
        AddLowRank(ctx, coeffs.data(), kTokens, kRank, bt.data(), n, rows.data());
      }
      return y;
    };
    const std::vector<float> expected = run(CpuIsa::kScalar, false);
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t j = 0; j < n; j += 97) {
        double sum = y0[t * n + j];
        for (int64_t r = 0; r < kRank; ++r) sum += double{coeffs[t * kRank + r]} * bt[r * n + j];
        EXPECT_NEAR(expected[t * n + j], sum, 1e-4) << "n " << n << " token " << t << " at " << j;
      }
    }
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
      if (!CpuSupports(isa)) continue;
      for (const bool alone : {false, true}) {
        const std::vector<float> got = run(isa, alone);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(expected[i]))
              << IsaName(isa) << (alone ? " alone" : " together") << " n " << n << " at " << i;
        }
      }
    }
  }
}

// With Bᵀ in f16 (half the bytes): every ISA's sums bit for bit those of the f32 kernel over
// the same values widened, so an f16 adapter's B changes nothing but the bytes read.
TEST(AddLowRankTest, F16BEqualsItsValuesInF32OnEveryIsa) {
  std::mt19937 rng(43);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t kTokens = 3, kRank = 16;
  for (const int64_t n : {8960, 576, 37}) {
    std::vector<float> coeffs(kTokens * kRank), y0(static_cast<size_t>(kTokens * n));
    std::vector<uint16_t> bt16(static_cast<size_t>(kRank * n));
    std::vector<float> bt32(bt16.size());
    for (float& v : coeffs) v = normal(rng);
    for (float& v : y0) v = normal(rng);
    for (size_t i = 0; i < bt16.size(); ++i) {
      bt16[i] = FloatToHalf(normal(rng));
      bt32[i] = HalfToFloat(bt16[i]);
    }
    const auto run = [&](CpuIsa isa, auto bt) {
      std::vector<float> y = y0;
      std::vector<float*> rows;
      for (int64_t t = 0; t < kTokens; ++t) rows.push_back(y.data() + t * n);
      AddLowRank(CpuContext{&KernelTable(isa)}, coeffs.data(), kTokens, kRank, bt, n,
                 rows.data());
      return y;
    };
    const std::vector<float> expected = run(CpuIsa::kScalar, bt32.data());
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
      if (!CpuSupports(isa)) continue;
      const std::vector<float> got = run(isa, bt16.data());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(expected[i]))
            << IsaName(isa) << " n " << n << " at " << i;
      }
    }
  }
}

TEST(SoftmaxTest, SumsToOneAndSurvivesLargeValues) {
  std::vector<float> x = {1000.0f, 999.0f, -1000.0f, 1000.0f};
  SoftmaxInPlace(x);
  const double e = std::exp(-1.0);
  EXPECT_NEAR(x[0], 1.0 / (2.0 + e), 1e-6);
  EXPECT_NEAR(x[1], e / (2.0 + e), 1e-6);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_FLOAT_EQ(x[0], x[3]);
}

// SoftmaxLikeGgml of every ISA against its definition in plain loops:
// GgmlVectorExpf of x - max, each 8 summed as ggml does (halves, lanes 0+2 and 1+3, then those
// two) into a double, scaled by 1 / sum. Bit for bit, at every length and far into the
// exponential's outer ranges.
TEST(SoftmaxTest, EqualsItsPlainLoopDefinitionBitForBit) {
  std::mt19937 rng(23);
  for (float spread : {1.0f, 30.0f, 200.0f}) {
    std::normal_distribution<float> value(0.0f, spread);
    for (size_t n = 1; n <= 70; ++n) {
      std::vector<float> x(n);
      for (float& v : x) v = value(rng);
      std::vector<float> expected = x;
      const float max = *std::max_element(x.begin(), x.end());
      double sum = 0.0;
      for (size_t i = 0; i < n; i += 8) {
        float e[8] = {};
        for (size_t l = 0; l < 8 && i + l < n; ++l) {
          expected[i + l] = e[l] = GgmlVectorExpf(x[i + l] - max);
        }
        const float h0 = e[0] + e[4], h1 = e[1] + e[5], h2 = e[2] + e[6], h3 = e[3] + e[7];
        sum += static_cast<double>((h0 + h2) + (h1 + h3));
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (float& v : expected) v *= inv;
      for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
        if (!CpuSupports(isa)) continue;
        std::vector<float> got = x;
        SoftmaxLikeGgml(CpuContext{&KernelTable(isa)}, got);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(got[i], expected[i])
              << IsaName(isa) << " length " << n << " spread " << spread << " at " << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 15, 16, 17, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 20; ++rep) {
        ParallelFor(&pool, n, 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 20) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPoolTest, ASlowThreadsRunIsStolenAndEveryChunkRunsOnce) {
  // The caller's first chunk is slow: the workers finish their own runs, then steal the rest
  // of the caller's run from its back while it is busy.
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 5; ++rep) {
      std::vector<std::atomic<int>> hits(40);
      const std::thread::id caller = std::this_thread::get_id();
      pool.RunChunks(40, [&](int64_t i) {
        if (i == 0 && std::this_thread::get_id() == caller) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        hits[i].fetch_add(1);
      });
      for (int i = 0; i < 40; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << i;
    }
  }
}

TEST(ThreadPoolTest, ManyShortJobsInARowEachRunEveryChunkOnce) {
  // The decode pattern: thousands of tiny jobs back to back, workers joining late or not.
  ThreadPool pool(3);
  std::vector<int64_t> sums(4);
  for (int job = 0; job < 20000; ++job) {
    std::atomic<int64_t> sum{0};
    const int64_t n = 1 + job % 7;
    pool.RunChunks(n, [&](int64_t i) { sum.fetch_add(i + 1); });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
  }
}

}  // namespace
}  // namespace tokenmill
