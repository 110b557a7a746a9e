// The decode GEMV's arithmetic (kernels/cuda/mmvq_math.h) on the CPU, against the CPU
// kernels: the packed layout against the reference dequantization, the q8_1 activations bit
// for bit against QuantizeActivations, MmvqDot within a stated bound of the CPU's Matmul, and
// the launch plan. No GPU needed (cuda_kernels_test checks MmvqDot against the kernel).
#include "kernels/cuda/mmvq_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/dequantize.h"
#include "kernels/half.h"
#include "kernels/tensor_type.h"

namespace tokenmill::cuda {
namespace {

// rows x cols of `type` in GGUF layout: random quants (and fifth bits), scales (and Q4_1 / Q5_1
// minimums) normal halves.
std::vector<uint8_t> RandomMatrix(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int unit = UnitBytes(static_cast<uint32_t>(type));
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / kQuantBlock * unit));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> value(-0.05f, 0.05f);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  for (size_t at = 0; at < bytes.size(); at += static_cast<size_t>(unit)) {
    for (int h = 0; h < (HasMin(static_cast<uint32_t>(type)) ? 2 : 1); ++h) {
      const uint16_t half = FloatToHalf(value(rng));
      std::memcpy(bytes.data() + at + 2 * h, &half, 2);
    }
  }
  return bytes;
}

std::vector<uint8_t> Pack(TensorType type, const std::vector<uint8_t>& gguf, int64_t rows,
                          int64_t cols) {
  const uint32_t id = static_cast<uint32_t>(type);
  const int64_t gguf_row = cols / kQuantBlock * UnitBytes(id);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * PackedRowBytes(id, cols)));
  for (int64_t r = 0; r < rows; ++r) {
    PackRow(id, gguf.data() + r * gguf_row, cols, packed.data() + r * PackedRowBytes(id, cols));
  }
  return packed;
}

// Each token's q8_1 activations (Q8_1TokenBytes apart).
std::vector<uint8_t> QuantizeTokens(const std::vector<float>& x, int64_t n_tokens, int64_t cols) {
  std::vector<uint8_t> out(static_cast<size_t>(n_tokens * Q8_1TokenBytes(cols)));
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* token = out.data() + t * Q8_1TokenBytes(cols);
    for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
      float ds[2];
      QuantizeQ8_1Block(x.data() + t * cols + b * kQuantBlock,
                        reinterpret_cast<int8_t*>(token + b * kQuantBlock), ds);
      std::memcpy(token + cols + 8 * b, ds, sizeof ds);
    }
  }
  return out;
}

class MmvqMathTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(MmvqMathTest, PackedRowsHoldTheReferenceElementsInAlignedWords) {
  const TensorType type = GetParam();
  const uint32_t id = static_cast<uint32_t>(type);
  std::mt19937 rng(5);
  for (const int64_t cols : {32, 96, 1184, 4096}) {
    const int64_t rows = 3;
    const std::vector<uint8_t> gguf = RandomMatrix(type, rows, cols, rng);
    const std::vector<uint8_t> packed = Pack(type, gguf, rows, cols);
    ASSERT_EQ(PackedRowBytes(id, cols) % kWordBytes, 0);
    ASSERT_EQ(PackedWords(id, cols) * WordElements(id), cols);
    // No bigger than the GGUF row but for the padding to a whole word.
    const int64_t gguf_row = cols / kQuantBlock * UnitBytes(id);
    ASSERT_EQ(PackedRowBytes(id, cols), CeilDiv(gguf_row, kWordBytes) * kWordBytes);
    std::vector<float> want(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeReference(type, gguf.data() + r * cols / kQuantBlock * UnitBytes(id), want);
      const uint8_t* row = packed.data() + r * PackedRowBytes(id, cols);
      for (int64_t i = 0; i < cols; ++i) {
        ASSERT_EQ(PackedElement(id, row, cols, i), want[static_cast<size_t>(i)]) << cols << "/" << i;
        float d, m;
        const int64_t w = i / WordElements(id);
        WordScales(id, row, cols, w, &d, &m);
        const int k = static_cast<int>(i % WordElements(id));
        const float mine = d * static_cast<float>(WordQuant(id, row, cols, w, k)) + m;
        ASSERT_EQ(mine, want[static_cast<size_t>(i)]) << "word " << w << " quant " << k;
      }
    }
  }
}

// The kernel's bit operations (FiveBitQuants, Iq4NlQuants: what WordDot feeds __dp4a) give the
// int8 quants WordQuant reads element by element, for every int of every word.
TEST(MmvqLaneTest, BitOperationsGiveTheWordsQuants) {
  std::mt19937 rng(17);
  for (const TensorType type : {TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kIQ4_NL}) {
    const uint32_t id = static_cast<uint32_t>(type);
    const int64_t rows = 4, cols = 64 * kQuantBlock;
    const std::vector<uint8_t> gguf = RandomMatrix(type, rows, cols, rng);
    const std::vector<uint8_t> packed = Pack(type, gguf, rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = packed.data() + r * PackedRowBytes(id, cols);
      for (int64_t w = 0; w < PackedWords(id, cols); ++w) {
        for (int i = 0; i < 4; ++i) {
          uint32_t qs;
          std::memcpy(&qs, row + w * kWordBytes + 4 * i, 4);
          uint32_t quants[2];  // elements 4i.., 16+4i..
          if (HasFifthBits(id)) {
            const uint32_t fifth = PackedFifthBits(id, row, cols, w);
            quants[0] = FiveBitQuants(id, qs, fifth, i, false);
            quants[1] = FiveBitQuants(id, qs, fifth, i, true);
          } else {
            Iq4NlQuants(qs, &quants[0], &quants[1]);
          }
          for (int half = 0; half < 2; ++half) {
            for (int b = 0; b < 4; ++b) {
              const int k = 16 * half + 4 * i + b;
              const int8_t got = static_cast<int8_t>(quants[half] >> (8 * b));
              ASSERT_EQ(got, WordQuant(id, row, cols, w, k))
                  << NameOf(type) << " row " << r << " word " << w << " element " << k;
            }
          }
        }
      }
    }
  }
}

// Σ over a (row, token) of |every term either side adds|: |d_w d_a q_w q_a| per element and
// |m_w · d_a Σq_a| per Q4_1 block.
double AbsTerms(uint32_t type, const uint8_t* row, const uint8_t* x_q8, int64_t cols) {
  const int8_t* qa = reinterpret_cast<const int8_t*>(x_q8);
  const float* ds = reinterpret_cast<const float*>(x_q8 + cols);
  double sum = 0;
  for (int64_t w = 0; w < PackedWords(type, cols); ++w) {
    float d, m;
    WordScales(type, row, cols, w, &d, &m);
    const int64_t first = w * WordElements(type);
    const float* block_ds = ds + 2 * (first / kQuantBlock);
    for (int k = 0; k < WordElements(type); ++k) {
      sum += std::fabs(static_cast<double>(d) * block_ds[0] * WordQuant(type, row, cols, w, k) *
                       qa[first + k]);
    }
    if (HasMin(type) && first % kQuantBlock == 0) sum += std::fabs(double{m} * block_ds[1]);
  }
  return sum;
}

// Both sides add the same exact terms (integer block sums times f16 x f16 scales, which are
// exact in float) in different orders: each result is within gamma_n of Σ|terms| of the
// exact sum, n bounding the roundings along any of its chains (the CPU: a lane's blocks, 3
// adds, the minimum term, and for IQ4_NL's two accumulators 1 more add and the last odd block;
// the GPU: a lane's words with 2 fmas each for Q4_1 / Q5_1, 5 butterfly adds),
// here n = 2 blocks + 8 for both. So |GPU - CPU| <= 2 gamma_n Σ|terms|, gamma_n = nu / (1 - nu).
TEST_P(MmvqMathTest, DotIsWithinTheRoundingBoundOfTheCpuMatmul) {
  const TensorType type = GetParam();
  const uint32_t id = static_cast<uint32_t>(type);
  std::mt19937 rng(11);
  std::normal_distribution<float> value(0.0f, 1.0f);
  for (const int64_t cols : {32, 1184, 4096, 14336}) {
    const int64_t rows = 9, n_tokens = 5;
    const std::vector<uint8_t> gguf = RandomMatrix(type, rows, cols, rng);
    const std::vector<uint8_t> packed = Pack(type, gguf, rows, cols);
    std::vector<float> x(static_cast<size_t>(n_tokens * cols));
    for (float& v : x) v = value(rng);
    x[7] = 0.0f;
    const std::vector<uint8_t> x_q8 = QuantizeTokens(x, n_tokens, cols);
    const WeightMatrix w{type, gguf.data(), rows, cols, cols / kQuantBlock * UnitBytes(id)};
    std::vector<float> cpu(static_cast<size_t>(rows * n_tokens));
    Matmul(CpuContext{&KernelTable(CpuIsa::kScalar)}, w, x.data(), n_tokens, cpu.data());
    const double n = 2.0 * static_cast<double>(cols / kQuantBlock) + 8.0;
    const double gamma = n * 0x1p-24 / (1.0 - n * 0x1p-24);
    double worst = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* token = x_q8.data() + t * Q8_1TokenBytes(cols);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = packed.data() + r * PackedRowBytes(id, cols);
        const float got = MmvqDot(id, row, token, cols);
        const float want = cpu[static_cast<size_t>(t * rows + r)];
        const double bound = 2.0 * gamma * AbsTerms(id, row, token, cols);
        ASSERT_LE(std::fabs(static_cast<double>(got) - want), bound)
            << NameOf(type) << " cols " << cols << " token " << t << " row " << r;
        worst = std::max(worst, std::fabs(static_cast<double>(got) - want) / bound);
      }
    }
    // The sums do differ in order (a bound that held only because both are equal would test
    // less than it says) — except where each lane has a single word.
    if (cols >= 4096) {
      EXPECT_GT(worst, 0.0) << NameOf(type) << " cols " << cols;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(QuantTypes, MmvqMathTest,
                         ::testing::Values(TensorType::kQ4_0, TensorType::kQ4_1,
                                           TensorType::kQ5_0, TensorType::kQ5_1,
                                           TensorType::kQ8_0, TensorType::kIQ4_NL),
                         [](const ::testing::TestParamInfo<TensorType>& type) {
                           return std::string(NameOf(type.param));
                         });

// The levels the kernel holds as four words are IQ4_NL's (kernels/dequantize.h), and
// BytePerm's host half is __byte_perm as CUDA documents it.
TEST(Iq4NlLevelsTest, AreTheReferenceLevels) {
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Iq4NlLevel(i), kIq4NlLevels[i]) << i;
  EXPECT_EQ(BytePerm(0x33221100u, 0x77665544u, 0x7531u), 0x77553311u);
  EXPECT_EQ(BytePerm(0x33221100u, 0x77665544u, 0x6420u), 0x66442200u);
  // A selector's bit 3 of each nibble and its upper 16 bits are not read.
  EXPECT_EQ(BytePerm(0x33221100u, 0x77665544u, 0x89abu), 0x00112233u);
  EXPECT_EQ(BytePerm(0x33221100u, 0x77665544u, 0xfedc0004u), 0x00000044u);
}

TEST(Q8_1ActivationsTest, EqualTheCpuQuantizationBitForBit) {
  std::mt19937 rng(3);
  std::normal_distribution<float> value(0.0f, 3.0f);
  const int64_t cols = 32 * 64;
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = value(rng);
  for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 0.0f;  // a zero block
  for (int i = 64; i < 96; ++i) x[static_cast<size_t>(i)] = (i % 5 - 2) * 0.5f;  // ties
  x[100] = 70000.0f;  // d past f16's range
  const std::vector<uint8_t> mine = QuantizeTokens(x, 1, cols);
  std::vector<Q8ActivationBlock> cpu(static_cast<size_t>(cols / kQuantBlock));
  QuantizeActivations(x.data(), cols, cpu.data());
  for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
    const Q8ActivationBlock& want = cpu[static_cast<size_t>(b)];
    ASSERT_EQ(std::memcmp(mine.data() + b * kQuantBlock, want.q, kQuantBlock), 0) << b;
    float ds[2];
    std::memcpy(ds, mine.data() + cols + 8 * b, sizeof ds);
    ASSERT_EQ(std::memcmp(&ds[0], &want.d, 4), 0) << "d of block " << b;
    ASSERT_EQ(std::memcmp(&ds[1], &want.scaled_sum, 4), 0) << "d sum of block " << b;
  }
}

TEST(MmvqPlanTest, CoversRowsAndTokensWithAtMostEightSumsALane) {
  for (const int64_t rows : {1, 7, 8, 9, 4096, 14336, 128256}) {
    for (int64_t tokens = 1; tokens <= 40; ++tokens) {
      const MmvqPlan p = PlanMmvq(rows, tokens);
      const int64_t rows_per_block = int64_t{p.rows_per_warp} * kMmvqWarps;
      EXPECT_GE(p.blocks_x * rows_per_block, rows);
      EXPECT_LT((p.blocks_x - 1) * rows_per_block, rows);
      EXPECT_GE(p.passes * p.tokens_per_pass, tokens);
      EXPECT_LT((p.passes - 1) * p.tokens_per_pass, tokens);
      EXPECT_LE(p.tokens_per_pass, kMmvqMaxTokens);
      EXPECT_LE(p.rows_per_warp * p.tokens_per_pass, 8);
      // No pass is more than half empty unless it is the only one.
      if (p.passes == 1) {
        EXPECT_LT(tokens, 2 * p.tokens_per_pass);
      }
    }
  }
}

}  // namespace
}  // namespace tokenmill::cuda
