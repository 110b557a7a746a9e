// The CUDA kernels' per-element math (kernels/cuda/kernel_math.h), run on the CPU against
// the CPU kernels: no GPU needed.
#include "kernels/cuda/kernel_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/dequantize.h"
#include "tests/kernels/cuda/rope_bound.h"
#include "kernels/half.h"
#include "kernels/tensor_type.h"

namespace tokenmill::cuda {
namespace {

// Random bytes of n elements of `type`, with scales that are normal halves.
std::vector<uint8_t> RandomRow(TensorType type, int64_t n, std::mt19937& rng) {
  const GgmlTypeLayout& layout = LayoutOf(type);
  std::vector<uint8_t> row(static_cast<size_t>(n / layout.block_size * layout.type_size));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : row) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  auto put_half = [&](size_t at) {
    const uint16_t h = FloatToHalf(value(rng));
    std::memcpy(row.data() + at, &h, 2);
  };
  if (type == TensorType::kF32) {
    for (int64_t i = 0; i < n; ++i) {
      const float f = value(rng);
      std::memcpy(row.data() + 4 * i, &f, 4);
    }
  } else if (type == TensorType::kF16) {
    for (int64_t i = 0; i < n; ++i) put_half(static_cast<size_t>(2 * i));
  } else if (type != TensorType::kBF16) {
    for (size_t b = 0; b < row.size(); b += static_cast<size_t>(layout.type_size)) {
      put_half(b);
      if (HasMin(static_cast<uint32_t>(type))) put_half(b + 2);
    }
  }
  return row;
}

class DequantTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(DequantTest, EveryElementEqualsTheReference) {
  const TensorType type = GetParam();
  std::mt19937 rng(7);
  const int64_t n = 8 * kQuantBlock;
  const std::vector<uint8_t> row = RandomRow(type, n, rng);
  std::vector<float> expected(static_cast<size_t>(n));
  DequantizeReference(type, row.data(), expected);
  const uint32_t id = static_cast<uint32_t>(type);
  for (int64_t i = 0; i < n; ++i) {
    const float got = DequantElement(id, row.data(), i);
    ASSERT_EQ(std::memcmp(&got, &expected[static_cast<size_t>(i)], 4), 0)
        << NameOf(type) << " element " << i << ": " << got << " vs " << expected[i];
  }
  if (IsQuantized(id)) {
    for (int64_t b = 0; b < n / kQuantBlock; ++b) {
      float block[kQuantBlock];
      DequantBlock(id, row.data(), b, block);
      for (int j = 0; j < kQuantBlock; ++j) {
        ASSERT_EQ(block[j], expected[static_cast<size_t>(b * kQuantBlock + j)]) << b << "/" << j;
      }
    }
  }
  EXPECT_EQ(UnitBytes(id) * (IsQuantized(id) ? n / kQuantBlock : n),
            static_cast<int64_t>(row.size()));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantTest,
                         ::testing::Values(TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                                           TensorType::kQ4_0, TensorType::kQ4_1,
                                           TensorType::kQ5_0, TensorType::kQ5_1,
                                           TensorType::kQ8_0, TensorType::kIQ4_NL),
                         [](const ::testing::TestParamInfo<TensorType>& type) {
                           return std::string(NameOf(type.param));
                         });

// RoPE as the CUDA kernel computes it (angles from RopeAngle with host-computed inverse
// frequencies, pairs from RopePair, separately rounded products). The CPU's ApplyRope follows
// llama.cpp instead (angles by a float recursion, fused rotation), so the two agree up to
// the float rounding of the angle, which grows with the position.
void RopeAsTheKernelDoes(const RopeParams& p, std::span<const int32_t> positions, int n_heads,
                         float* x) {
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + (static_cast<int64_t>(t) * n_heads + h) * p.head_dim;
      for (int i = 0; i < p.n_rot / 2; ++i) {
        const double inv_freq = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
        const float factor = p.freq_factors.empty() ? 1.0f : p.freq_factors[static_cast<size_t>(i)];
        const double theta = RopeYarnAngle(positions[t], p.position_scale, inv_freq, factor, i,
                                           p.ext_factor, p.corr_low, p.corr_high);
        const float c = static_cast<float>(std::cos(theta)) * RopeCosSinScale(p);
        const float s = static_cast<float>(std::sin(theta)) * RopeCosSinScale(p);
        int i0, i1;
        RopePair(p.style == RopeStyle::kNeox, i, p.n_rot, &i0, &i1);
        const float a = head[i0];
        const float b = head[i1];
        const float ac = a * c, bs = b * s, as = a * s, bc = b * c;
        head[i0] = ac - bs;
        head[i1] = as + bc;
      }
    }
  }
}

TEST(RopeMathTest, AnglesAndPairsMatchApplyRopeUpToAngleRounding) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const std::vector<float> factors = {1.0f, 1.5f, 4.0f, 8.0f, 2.0f, 1.0f, 3.0f, 1.25f};
  std::vector<float> wide_factors(32);  // the shape of cuda_kernels_test.cc's RoPE test
  for (float& f : wide_factors) f = 1.0f + std::fabs(value(rng)) * 0.1f;
  struct Shape {
    int head_dim, n_rot;
    float position_scale;
    std::span<const float> factors;
    std::vector<int32_t> positions;
  };
  const Shape shapes[] = {
      {32, 16, 1.0f, {}, {0, 1, 7, 100, 4095, 30000}},
      {32, 16, 0.25f, factors, {0, 1, 7, 100, 4095, 30000}},
      {64, 64, 0.5f, wide_factors, {0, 5, 77, 1000, 8191}},
  };
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
    for (const Shape& shape : shapes) {
      const RopeParams p{style, shape.head_dim, shape.n_rot, 500000.0f, shape.position_scale,
                         shape.factors};
      const int n_heads = 3;
      std::vector<float> x(shape.positions.size() * n_heads * shape.head_dim);
      for (float& v : x) v = value(rng);
      std::vector<float> expected = x;
      ApplyRope(p, shape.positions, n_heads, expected.data());
      RopeAsTheKernelDoes(p, shape.positions, n_heads, x.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const int32_t position = shape.positions[i / (n_heads * shape.head_dim)];
        ASSERT_NEAR(x[i], expected[i], RopeCpuGap(position))
            << "style " << static_cast<int>(style) << " n_rot " << shape.n_rot << " position "
            << position;
      }
    }
  }
}

// The same with YaRN (its ramp over the correction range and its magnitude) and an attention
// factor on cos and sin (LongRoPE's), as the families' files set them.
TEST(RopeMathTest, YarnAndTheAttentionFactorMatchApplyRopeUpToAngleRounding) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const std::vector<int32_t> positions = {0, 1, 7, 33, 100, 4095};
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
    for (const bool yarn : {false, true}) {
      RopeParams p{style, 32, 32, 1000000.0f, yarn ? 0.125f : 1.0f, {}};
      p.ext_factor = yarn ? 1.0f : 0.0f;
      p.attn_factor = yarn ? 0.97f : 1.19f;
      const std::array<float, 2> corr = YarnCorrectionDims(32, 32, p.freq_base, 32.0f, 1.0f);
      p.corr_low = corr[0];
      p.corr_high = corr[1];
      ASSERT_LT(p.corr_low, p.corr_high);  // the ramp mixes some pairs
      const int n_heads = 2;
      std::vector<float> x(positions.size() * n_heads * 32);
      for (float& v : x) v = value(rng);
      std::vector<float> expected = x;
      ApplyRope(p, positions, n_heads, expected.data());
      RopeAsTheKernelDoes(p, positions, n_heads, x.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const int32_t position = positions[i / (n_heads * 32)];
        ASSERT_NEAR(x[i], expected[i], RopeCpuGap(position))
            << "style " << static_cast<int>(style) << " yarn " << yarn << " position "
            << position;
      }
    }
  }
}

// Flash-decoding: partials over the splits of NumSplits, merged in order, give the softmax-
// weighted sum that SoftmaxInPlace gives over all positions at once.
TEST(OnlineSoftmaxTest, SplitPartialsMergeToTheFullSoftmax) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const int d = 5;
  for (int32_t len : {1, 2, 255, 256, 257, 1000, 4096}) {
    std::vector<float> scores(static_cast<size_t>(len));
    std::vector<float> v(static_cast<size_t>(len) * d);
    for (float& s : scores) s = normal(rng);
    for (float& x : v) x = normal(rng);
    std::vector<float> p = scores;
    SoftmaxInPlace(p);
    std::vector<double> expected(d, 0.0);
    for (int32_t j = 0; j < len; ++j) {
      for (int i = 0; i < d; ++i) expected[i] += static_cast<double>(p[j]) * v[j * d + i];
    }

    SoftmaxPartial total = EmptyPartial();
    std::vector<float> acc(d, 0.0f);
    for (int split = 0; split < NumSplits(len); ++split) {
      SoftmaxPartial state = EmptyPartial();
      std::vector<float> part(d, 0.0f);
      for (int32_t j = SplitBegin(split, len); j < SplitEnd(split, len); ++j) {
        float w;
        const float factor = AddScore(&state, scores[j], &w);
        for (int i = 0; i < d; ++i) part[i] = MulAdd(w, v[j * d + i], part[i] * factor);
      }
      const SoftmaxMerge merge = MergePartials(total, state);
      for (int i = 0; i < d; ++i) acc[i] = MulAdd(acc[i], merge.scale_a, part[i] * merge.scale_b);
      total = merge.merged;
    }
    for (int i = 0; i < d; ++i) {
      EXPECT_NEAR(acc[i] / total.l, expected[i], 1e-4 * (1.0 + std::fabs(expected[i])))
          << "len " << len << " dim " << i;
    }
  }
}

// A sliding window as the attention kernel applies it: the splits stay those of the token's
// length, positions before FirstVisible are skipped (a split wholly before the window leaves
// an empty partial) and the merge gives the softmax over the window's positions alone.
TEST(OnlineSoftmaxTest, WindowedSplitsMergeToTheWindowsSoftmax) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  EXPECT_EQ(FirstVisible(0, 500), 0);
  EXPECT_EQ(FirstVisible(6, 3), 0);
  EXPECT_EQ(FirstVisible(6, 5), 0);
  EXPECT_EQ(FirstVisible(6, 6), 1);
  EXPECT_EQ(FirstVisible(1, 9), 9);
  for (int32_t window : {1, 6, 64, 65, 300}) {
    for (int32_t len : {1, 7, 64, 65, 257, 1000}) {
      const int32_t begin = FirstVisible(window, len - 1);
      std::vector<float> scores(static_cast<size_t>(len));
      for (float& s : scores) s = normal(rng);
      std::vector<float> p(scores.begin() + begin, scores.end());
      ASSERT_EQ(static_cast<int32_t>(p.size()), std::min(window, len));
      SoftmaxInPlace(p);
      double expected = 0.0;  // the probability-weighted position (v_j = j)
      for (size_t j = 0; j < p.size(); ++j) expected += static_cast<double>(p[j]) * (begin + j);
      SoftmaxPartial total = EmptyPartial();
      float acc = 0.0f;
      for (int split = 0; split < NumSplits(len); ++split) {
        SoftmaxPartial state = EmptyPartial();
        float part = 0.0f;
        for (int32_t j = std::max(SplitBegin(split, len), begin); j < SplitEnd(split, len); ++j) {
          float w;
          const float factor = AddScore(&state, scores[j], &w);
          part = MulAdd(w, static_cast<float>(j), part * factor);
        }
        const SoftmaxMerge merge = MergePartials(total, state);
        acc = MulAdd(acc, merge.scale_a, part * merge.scale_b);
        total = merge.merged;
      }
      EXPECT_NEAR(acc / total.l, expected, 1e-4 * (1.0 + expected))
          << "window " << window << " len " << len;
    }
  }
}

TEST(OnlineSoftmaxTest, MergingAnEmptyPartialChangesNothing) {
  const SoftmaxPartial a{2.0f, 3.0f};
  const SoftmaxMerge left = MergePartials(EmptyPartial(), a);
  EXPECT_EQ(left.merged.m, 2.0f);
  EXPECT_EQ(left.merged.l, 3.0f);
  EXPECT_EQ(left.scale_a, 0.0f);
  EXPECT_EQ(left.scale_b, 1.0f);
  const SoftmaxMerge right = MergePartials(a, EmptyPartial());
  EXPECT_EQ(right.merged.l, 3.0f);
  EXPECT_EQ(right.scale_a, 1.0f);
  EXPECT_EQ(right.scale_b, 0.0f);
}

TEST(SplitPartitionTest, SplitsCoverEveryPositionOnceAndNoneIsEmpty) {
  for (int32_t len = 1; len <= 40000; len += len < 5000 ? 1 : 97) {
    ASSERT_LE(NumSplits(len), kMaxSplits) << len;
    ASSERT_EQ(SplitPositions(len) % 16, 0) << "whole shared-memory tiles";
    int32_t next = 0;
    for (int s = 0; s < NumSplits(len); ++s) {
      ASSERT_EQ(SplitBegin(s, len), next) << len;
      ASSERT_GT(SplitEnd(s, len), SplitBegin(s, len)) << len << " split " << s;
      next = SplitEnd(s, len);
    }
    ASSERT_EQ(next, len);
  }
  // Short contexts still spread over several blocks; 16k stays at kMaxSplits.
  EXPECT_EQ(NumSplits(1024), 16);
  EXPECT_EQ(NumSplits(4096), 64);
  EXPECT_EQ(NumSplits(16384), 64);
  EXPECT_EQ(SplitPositions(16384), 256);
  EXPECT_EQ(NumSplits(16385), 33);
}

TEST(AttentionTilesTest, EveryTokenOnceInTilesOfOneSequenceAndOneSplitSize) {
  // Sequence 0 decodes at 5000, sequence 1 prefills 4090..4105 (its split size changes at
  // length 4097), sequence 2 prefills 0..9.
  std::vector<int32_t> positions = {4999};
  for (int32_t p = 4090; p < 4106; ++p) positions.push_back(p);
  for (int32_t p = 0; p < 10; ++p) positions.push_back(p);
  const std::vector<int32_t> cu_seqlens = {0, 1, 17, 27};
  for (int group : {1, 3, 4, 8, 16}) {
    const std::vector<int32_t> tiles = BuildAttentionTiles(positions, cu_seqlens, group);
    ASSERT_EQ(tiles.size() % 2, 0u);
    std::vector<int> seen(positions.size(), 0);
    for (size_t i = 0; i < tiles.size(); i += 2) {
      const int32_t first = tiles[i], count = tiles[i + 1];
      ASSERT_GE(count, 1);
      ASSERT_LE(count, TileTokens(group));
      ASSERT_LE(count * group, std::max(kMaxTilePairs, group));
      const auto seq = std::upper_bound(cu_seqlens.begin(), cu_seqlens.end(), first) - 1;
      ASSERT_LE(first + count, *(seq + 1)) << "a tile crosses sequences";
      for (int32_t t = first; t < first + count; ++t) {
        ++seen[static_cast<size_t>(t)];
        ASSERT_EQ(SplitPositions(positions[t] + 1), SplitPositions(positions[first] + 1));
      }
    }
    for (int n : seen) ASSERT_EQ(n, 1) << "group " << group;
  }
  EXPECT_EQ(BuildAttentionTiles(positions, cu_seqlens, 16).size() / 2, positions.size());
}

// The split kernel's shared-memory stages: within the default 48 KiB for every head size and
// KV element size, every part 16-byte aligned, 16 positions a tile but for f32 rows of 192
// elements or more (8), and 16-byte pieces exactly for whole-piece rows of an aligned pool.
TEST(AttentionTilePlanTest, StagesFitTheDefaultSharedMemoryAndStayAligned) {
  for (const int elem_bytes : {1, 2, 4}) {
    for (int head_dim = 1; head_dim <= kMaxHeadDim; ++head_dim) {
      for (const bool aligned : {false, true}) {
        const AttentionTilePlan plan = PlanAttentionTiles(head_dim, elem_bytes, aligned);
        const int row_bytes = head_dim * elem_bytes;
        ASSERT_EQ(plan.row_bytes, row_bytes);
        ASSERT_EQ(plan.vector_rows, aligned && row_bytes % 16 == 0) << row_bytes;
        ASSERT_EQ(plan.positions, elem_bytes == 4 && head_dim >= 192 ? 8 : 16)
            << elem_bytes << " x " << head_dim;
        ASSERT_EQ(plan.kv_bytes % kCopyBytes, 0);
        ASSERT_GE(plan.kv_bytes, int64_t{plan.positions} * row_bytes);
        ASSERT_LT(plan.kv_bytes, int64_t{plan.positions} * row_bytes + kCopyBytes);
        ASSERT_EQ(plan.stage_bytes % kCopyBytes, 0);
        ASSERT_GE(plan.stage_bytes, 2 * plan.kv_bytes + 2 * plan.positions * 4);  // + scales
        ASSERT_EQ(plan.shared_bytes, kAttentionStages * plan.stage_bytes);
        ASSERT_LE(plan.shared_bytes, kDefaultSharedBytes);
      }
    }
  }
  const AttentionTilePlan f16 = PlanAttentionTiles(128, 2, true);  // Llama's f16 rows
  EXPECT_TRUE(f16.vector_rows);
  EXPECT_EQ(f16.kv_bytes, 4096);
  EXPECT_EQ(f16.shared_bytes, 2 * (2 * 4096 + 128));
  const AttentionTilePlan f32 = PlanAttentionTiles(256, 4, true);  // 16 x 1 KiB: 64 KiB
  EXPECT_EQ(f32.positions, 8);
  EXPECT_EQ(f32.shared_bytes, 2 * (2 * 8192 + 64));
  EXPECT_FALSE(PlanAttentionTiles(13, 2, true).vector_rows);   // 26-byte rows
  EXPECT_FALSE(PlanAttentionTiles(40, 1, true).vector_rows);   // 40-byte rows
  EXPECT_TRUE(PlanAttentionTiles(48, 1, true).vector_rows);    // 3 pieces
  EXPECT_FALSE(PlanAttentionTiles(128, 2, false).vector_rows); // an offset pool
}

// The 4-bit types' stages: rows of head_dim / 2 bytes, always whole 16-byte pieces (heads of
// whole blocks of 32) in an aligned pool, and their f16 scales (q4_0: head_dim / 16 bytes a
// row, int4: head_dim / 8) after K's and V's rows, V's after K's.
TEST(AttentionTilePlanTest, FourBitStagesHoldTheirScales) {
  for (int head_dim = 32; head_dim <= kMaxHeadDim; head_dim += 32) {
    for (const int scale_bytes : {head_dim / 16, head_dim / 8}) {
      const AttentionTilePlan plan = PlanAttentionTileRows(head_dim / 2, scale_bytes, true);
      ASSERT_TRUE(plan.vector_rows) << head_dim;
      ASSERT_EQ(plan.positions, kAttentionTile);
      ASSERT_EQ(plan.scale_bytes, scale_bytes);
      ASSERT_EQ(plan.kv_bytes, kAttentionTile * head_dim / 2);
      ASSERT_GE(plan.stage_bytes, 2 * plan.kv_bytes + 2 * plan.positions * scale_bytes);
      ASSERT_EQ(plan.stage_bytes % kCopyBytes, 0);
      ASSERT_LE(plan.shared_bytes, kDefaultSharedBytes);
    }
  }
  EXPECT_EQ(PlanAttentionTiles(128, 1, true).scale_bytes, 4);  // int8's float, as before
  EXPECT_FALSE(PlanAttentionTileRows(64, 8, false).vector_rows);
}

// Multi-head latent attention's stages (v_in_k): K's rows and scales alone, so DeepSeek's
// 576-value rows keep 16 positions a tile in f16 (18 KiB a stage) and 8 in f32, within the
// default 48 KiB for every row up to kMaxLatentHeadDim; the tiny test families' rows of 56
// are 16-byte pieces in f16 (7) but not in int8 (56 bytes: element by element).
TEST(AttentionTilePlanTest, LatentStagesHoldKAlone) {
  for (const int elem_bytes : {1, 2, 4}) {
    for (int head_dim = 1; head_dim <= kMaxLatentHeadDim; ++head_dim) {
      const AttentionTilePlan plan = PlanAttentionTiles(head_dim, elem_bytes, true, true);
      const int row_bytes = head_dim * elem_bytes;
      ASSERT_TRUE(plan.v_in_k);
      ASSERT_EQ(plan.vector_rows, row_bytes % 16 == 0) << row_bytes;
      ASSERT_GE(plan.kv_bytes, int64_t{plan.positions} * row_bytes);
      ASSERT_EQ(plan.stage_bytes % kCopyBytes, 0);
      ASSERT_GE(plan.stage_bytes, plan.kv_bytes + plan.positions * 4);  // K's scales
      ASSERT_LT(plan.stage_bytes, plan.kv_bytes + plan.positions * 4 + kCopyBytes);
      ASSERT_LE(plan.shared_bytes, kDefaultSharedBytes);
      ASSERT_GE(plan.positions, 8);
      if (head_dim <= kMaxHeadDim) {  // never more than the GQA plan of the same rows
        ASSERT_LE(plan.shared_bytes, PlanAttentionTiles(head_dim, elem_bytes, true).shared_bytes);
      }
    }
  }
  const AttentionTilePlan f16 = PlanAttentionTiles(576, 2, true, true);
  EXPECT_EQ(f16.positions, 16);
  EXPECT_TRUE(f16.vector_rows);
  EXPECT_EQ(f16.kv_bytes, 16 * 1152);
  EXPECT_EQ(f16.shared_bytes, 2 * (16 * 1152 + 64));
  const AttentionTilePlan f32 = PlanAttentionTiles(576, 4, true, true);
  EXPECT_EQ(f32.positions, 8);
  EXPECT_EQ(f32.shared_bytes, 2 * (8 * 2304 + 32));
  EXPECT_TRUE(PlanAttentionTiles(576, 1, true, true).vector_rows);  // int8: 36 pieces
  EXPECT_TRUE(PlanAttentionTiles(56, 2, true, true).vector_rows);
  EXPECT_FALSE(PlanAttentionTiles(56, 1, true, true).vector_rows);
}

// Which shapes the kernel takes: GQA as before; latent rows up to 576, any group up to 16 or a
// multiple of 16 (V2-Lite's 16 heads, V3's 128, Kimi K2's 64), V no wider than the row.
TEST(AttentionShapeTest, LatentRowsTakeManyHeadsAndGqaStaysAsItWas) {
  EXPECT_TRUE(AttentionShapeFits(128, 4, false, 0));
  EXPECT_TRUE(AttentionShapeFits(256, 16, false, 0));
  EXPECT_FALSE(AttentionShapeFits(257, 1, false, 0));
  EXPECT_FALSE(AttentionShapeFits(128, 17, false, 0));
  EXPECT_FALSE(AttentionShapeFits(576, 16, false, 0));  // a GQA head of 576: no
  EXPECT_FALSE(AttentionShapeFits(128, 4, false, 64));
  EXPECT_TRUE(AttentionShapeFits(576, 16, true, 512));
  EXPECT_TRUE(AttentionShapeFits(576, 128, true, 512));
  EXPECT_TRUE(AttentionShapeFits(576, 64, true, 512));
  EXPECT_TRUE(AttentionShapeFits(56, 4, true, 40));
  EXPECT_TRUE(AttentionShapeFits(56, 3, true, 0));
  EXPECT_FALSE(AttentionShapeFits(577, 16, true, 512));
  EXPECT_FALSE(AttentionShapeFits(576, 24, true, 512));  // past 16, not a multiple of 16
  EXPECT_FALSE(AttentionShapeFits(576, 16, true, 577));
}

// The blocks of a KV head (grid rows y, HeadChunks of them) and their pairs cover every
// (token, query head) of the batch once: the tiles' tokens x BlockGroup heads, at most
// kMaxTilePairs pairs a block, for GQA groups and the latent's 16, 64 and 128 heads.
TEST(AttentionShapeTest, ChunksAndPairsCoverEveryTokenAndHeadOnce) {
  std::vector<int32_t> positions = {700};
  for (int32_t p = 60; p < 80; ++p) positions.push_back(p);
  const std::vector<int32_t> cu_seqlens = {0, 1, 21};
  for (const int n_kv_heads : {1, 2}) {
    for (const int group : {1, 3, 4, 16, 32, 64, 128}) {
      const int n_heads = n_kv_heads * group;
      const std::vector<int32_t> tiles = BuildAttentionTiles(positions, cu_seqlens, group);
      std::vector<int> seen(positions.size() * static_cast<size_t>(n_heads), 0);
      for (size_t i = 0; i < tiles.size(); i += 2) {
        const int32_t first = tiles[i], count = tiles[i + 1];
        const int n_pairs = std::min(count * BlockGroup(group), kMaxTilePairs);
        ASSERT_EQ(n_pairs, count * BlockGroup(group)) << "a tile's pairs fit one block";
        for (int y = 0; y < n_kv_heads * HeadChunks(group); ++y) {
          for (int pair = 0; pair < n_pairs; ++pair) {
            const int head = ChunkPairHead(group, y, pair);
            ASSERT_EQ(head / group, y / HeadChunks(group)) << "a head of the block's KV head";
            ++seen[static_cast<size_t>(first + ChunkPairToken(group, pair)) * n_heads + head];
          }
        }
      }
      for (int n : seen) ASSERT_EQ(n, 1) << n_kv_heads << " KV heads, group " << group;
    }
  }
}

// The latent kernel's arithmetic for one (token, head) pair, emulated on the host: the token's
// splits (SplitPositions of its length), each position's score q.k x scale, AddScore and the
// weighted V (the row's first value_dim elements, V within K), the splits merged in order with
// MergePartials; the CPU's PagedAttentionReference over the same f32 latent cache (v_in_k,
// one KV head) gives the same output to float rounding. 16 heads of rows of 576 (V2-Lite:
// V of 512) and the tiny families' 4 heads of 56 (V of 40), at lengths crossing splits.
TEST(OnlineSoftmaxTest, LatentSplitsEqualTheCpusMultiQueryAttentionOverTheLatentRows) {
  std::mt19937 rng(19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Shape {
    int head_dim, value_dim, n_heads;
  };
  for (const Shape shape : {Shape{576, 512, 16}, Shape{56, 40, 4}}) {
    for (const int32_t len : {1, 63, 65, 300, 1500}) {
      const int block_size = 16;
      const int64_t n_blocks = (len + block_size - 1) / block_size;
      const int d = shape.head_dim;
      std::vector<float> k(static_cast<size_t>(n_blocks * block_size) * d);
      for (float& x : k) x = normal(rng);
      // One token, the last position of its sequence; blocks in order.
      std::vector<float> q(static_cast<size_t>(shape.n_heads) * d);
      for (float& x : q) x = 0.2f * normal(rng);
      std::vector<int32_t> indices(static_cast<size_t>(n_blocks));
      for (int32_t b = 0; b < n_blocks; ++b) indices[static_cast<size_t>(b)] = b;
      const std::vector<int32_t> positions = {len - 1}, cu = {0, 1},
                                 indptr = {0, static_cast<int32_t>(n_blocks)},
                                 last = {len - (static_cast<int32_t>(n_blocks) - 1) * block_size};
      const std::vector<int64_t> slots = {int64_t{len - 1}};
      const KvBlockTable table{slots, indptr, indices, last};
      const RaggedBatch batch{positions, cu, {&table, 1}};
      KvCacheView kv{.type = KvType::kF32, .k = k.data(), .v = k.data(), .num_blocks = n_blocks,
                     .block_size = block_size, .n_kv_heads = 1, .head_dim = d};
      kv.v_in_k = true;
      const float scale = 0.07f;
      std::vector<float> want(q.size());
      PagedAttentionReference(kv, batch, table, q.data(), shape.n_heads, scale, want.data());
      for (int h = 0; h < shape.n_heads; ++h) {
        const float* qh = q.data() + static_cast<size_t>(h) * d;
        SoftmaxPartial total = EmptyPartial();
        std::vector<float> acc(static_cast<size_t>(shape.value_dim), 0.0f);
        for (int split = 0; split < NumSplits(len); ++split) {
          SoftmaxPartial state = EmptyPartial();
          std::vector<float> part(acc.size(), 0.0f);
          for (int32_t p = SplitBegin(split, len); p < SplitEnd(split, len); ++p) {
            const float* row = k.data() + static_cast<size_t>(p) * d;
            float dot = 0.0f;
            for (int i = 0; i < d; ++i) dot = MulAdd(qh[i], row[i], dot);
            float w;
            const float factor = AddScore(&state, MulRn(dot, scale), &w);
            for (int i = 0; i < shape.value_dim; ++i) {
              part[i] = MulAdd(w, row[i], MulRn(part[i], factor));
            }
          }
          const SoftmaxMerge merge = MergePartials(total, state);
          for (size_t i = 0; i < acc.size(); ++i) {
            acc[i] = MulAdd(acc[i], merge.scale_a, part[i] * merge.scale_b);
          }
          total = merge.merged;
        }
        for (int i = 0; i < shape.value_dim; ++i) {
          const float cpu = want[static_cast<size_t>(h) * d + i];
          ASSERT_NEAR(acc[static_cast<size_t>(i)] / total.l, cpu, 2e-5f * (1.0f + std::fabs(cpu)))
              << "rows of " << d << ", length " << len << ", head " << h << ", element " << i;
        }
      }
    }
  }
}

TEST(LaunchGeometryTest, GemvGridCoversRowsAndTokens) {
  for (int64_t rows : {1, 3, 4, 5, 576, 49152}) {
    for (int64_t tokens : {1, 7, 8, 9, 2048}) {
      const GemvGrid g = GemvGeometry(rows, tokens);
      EXPECT_GE(g.blocks_x * kGemvWarps, rows);
      EXPECT_LT((g.blocks_x - 1) * kGemvWarps, rows);
      EXPECT_GE(g.blocks_y * kGemvTokens, tokens);
      EXPECT_LT((g.blocks_y - 1) * kGemvTokens, tokens);
    }
  }
}

// The bf16 rounding of cuBLAS's operands: worked values (ties to even, f16's overflow range,
// inf and NaN), then over random floats of every magnitude the result is the nearest bf16,
// a tie going to the even one.
TEST(Bf16MathTest, RoundsToTheNearestEvenAndKeepsF32Range) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(1.0f + 0x1p-8f), 0x3f80);       // a tie: down to the even 0x3f80
  EXPECT_EQ(FloatToBf16Bits(1.0f + 3 * 0x1p-8f), 0x3f82);   // a tie: up to the even 0x3f82
  EXPECT_EQ(FloatToBf16Bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // past the tie: up
  EXPECT_EQ(FloatToBf16Bits(-2.0f), 0xc000);
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(100000.0f)), 99840.0f);  // f16 would give inf
  EXPECT_EQ(FloatToBf16Bits(INFINITY), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(3.4e38f), 0x7f80);  // above bf16's largest finite: rounds to inf
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(NAN))));
  std::mt19937 rng(7);
  // Every positive float below the rounding point of bf16's largest finite (0x7f7f).
  std::uniform_int_distribution<uint32_t> bits(0, 0x7f7f7fffu);
  for (int i = 0; i < 100000; ++i) {
    uint32_t raw = bits(rng);
    float f;
    std::memcpy(&f, &raw, sizeof f);
    const uint16_t b = FloatToBf16Bits(f);
    const double error = std::fabs(static_cast<double>(Bf16BitsToFloat(b)) - f);
    for (const uint16_t other : {static_cast<uint16_t>(b - 1), static_cast<uint16_t>(b + 1)}) {
      if (std::isnan(Bf16BitsToFloat(other))) continue;  // below 0: 0xffff
      const double other_error = std::fabs(static_cast<double>(Bf16BitsToFloat(other)) - f);
      ASSERT_TRUE(error < other_error || (error == other_error && (b & 1) == 0))
          << std::hex << raw;
    }
    ASSERT_EQ(FloatToBf16Bits(-f), b | 0x8000) << std::hex << raw;
  }
}

}  // namespace
}  // namespace tokenmill::cuda
