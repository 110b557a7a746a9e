// Matmul kernels: every ISA path against the float reference (within the error of
// int8 activations) and against each other, on random weights of every type and
// awkward sizes; plus batch-size independence (determinism).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dequantize_k_quants.h"
#include "kernels/half.h"
#include "kernels/tensor_type.h"

namespace tokenmill {
namespace {

std::vector<CpuIsa> SupportedIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

// Random weights of `type`: valid blocks with random scales and quants.
std::vector<uint8_t> RandomWeights(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const GgmlTypeLayout& layout = LayoutOf(type);
  const int64_t row_bytes = cols / layout.block_size * layout.type_size;
  std::vector<uint8_t> data(static_cast<size_t>(rows * row_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  auto put16 = [&](size_t at, uint16_t v) { std::memcpy(&data[at], &v, 2); };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / layout.block_size; ++b) {
      const size_t at = static_cast<size_t>(r * row_bytes + b * layout.type_size);
      switch (type) {
        case TensorType::kF32: {
          const float v = normal(rng) * 0.1f;
          std::memcpy(&data[at], &v, 4);
          break;
        }
        case TensorType::kF16: put16(at, FloatToHalf(normal(rng) * 0.1f)); break;
        case TensorType::kBF16: {
          const float v = normal(rng) * 0.1f;
          put16(at, static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));
          break;
        }
        case TensorType::kQ4_1:
        case TensorType::kQ5_1:
          put16(at, FloatToHalf(scale(rng)));
          put16(at + 2, FloatToHalf(-8.0f * scale(rng)));
          for (int i = 4; i < layout.type_size; ++i) data[at + i] = static_cast<uint8_t>(byte(rng));
          break;
        case TensorType::kQ4_0:
        case TensorType::kQ5_0:
        case TensorType::kIQ4_NL:
          put16(at, FloatToHalf(scale(rng)));
          for (int i = 2; i < layout.type_size; ++i) data[at + i] = static_cast<uint8_t>(byte(rng));
          break;
        case TensorType::kMXFP4:
          // Exponents of real weights' magnitudes (2^-14..2^-3) and the subnormal 0 and 1.
          data[at] = static_cast<uint8_t>(b % 13 == 0 ? b % 2 : 114 + byte(rng) % 12);
          for (int i = 1; i < layout.type_size; ++i) data[at + i] = static_cast<uint8_t>(byte(rng));
          break;
        case TensorType::kQ8_0:
          put16(at, FloatToHalf(scale(rng) / 8.0f));
          // Includes -128, which the sign trick of the SIMD paths must handle.
          for (int i = 2; i < 34; ++i) data[at + i] = static_cast<uint8_t>(byte(rng));
          break;
        default:  // the 256-element block types: every quant and sub-block scale
          for (int i = 0; i < layout.type_size; ++i) data[at + i] = static_cast<uint8_t>(byte(rng));
          for (int f16 : KQuantF16Offsets(type)) put16(at + f16, FloatToHalf(scale(rng) / 8.0f));
          break;
      }
    }
  }
  return data;
}

std::vector<float> RandomActivations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

struct Case {
  TensorType type;
  int64_t rows, cols, tokens;
};

class MatmulTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(MatmulTest, EveryIsaMatchesTheReferenceAndEachOther) {
  const TensorType type = GetParam();
  const int64_t block = LayoutOf(type).block_size;
  std::mt19937 rng(42);
  ThreadPool pool(3);
  // Awkward sizes: odd row counts, token counts around the tile width, float types with
  // columns that are no multiple of 8.
  const std::vector<Case> cases = {
      {type, 1, block == 1 ? 3 : 32, 1},       {type, 37, block == 1 ? 171 : 96, 5},
      {type, 129, block == 1 ? 64 : 576, 7},   {type, 16, block == 1 ? 9 : 160, 4},
      {type, 300, block == 1 ? 250 : 1536, 2}, {type, 21, block == 1 ? 40 : 192, 19},
      {type, 6, block == 1 ? 16 : 64, 8},
  };
  for (Case c : cases) {
    if (block == 256) c.cols = (c.cols + 255) / 256 * 256;
    const std::vector<uint8_t> data = RandomWeights(type, c.rows, c.cols, rng);
    const WeightMatrix w{type, data.data(), c.rows, c.cols,
                         c.cols / block * LayoutOf(type).type_size};
    const std::vector<float> x = RandomActivations(c.tokens * c.cols, rng);
    std::vector<float> expected(static_cast<size_t>(c.tokens * c.rows));
    // The 256-element block types against their own int8 activations, dequantized: then only
    // float rounding differs, and every quant and scale of the kernels is checked against the
    // reference dequantization (the Q8_K error alone can pass 2% where the terms cancel).
    const bool q8k = UsesQ8KActivations(type);
    std::vector<float> x_ref = x;
    if (q8k) {
      std::vector<Q8KActivationBlock> blocks(x.size() / 256);
      QuantizeActivationsQ8K(x.data(), static_cast<int64_t>(x.size()), blocks.data());
      for (size_t i = 0; i < x.size(); ++i) x_ref[i] = blocks[i / 256].d * blocks[i / 256].q[i % 256];
    }
    MatmulReference(w, x_ref.data(), c.tokens, expected.data());
    float scale = 0.0f;
    for (float v : expected) scale = std::max(scale, std::fabs(v));
    std::vector<float> scalar_result;
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> y(expected.size(), NAN);
      Matmul(CpuContext{&KernelTable(isa), &pool}, w, x.data(), c.tokens, y.data());
      // Int8 activations lose ~1/254 of each block's range; float paths only rounding.
      const float tolerance =
          (q8k ? 1e-4f : UsesQuantizedActivations(type) ? 2e-2f : 1e-5f) * scale + 1e-6f;
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], expected[i], tolerance)
            << IsaName(isa) << " " << NameOf(type) << " rows " << c.rows << " cols " << c.cols
            << " tokens " << c.tokens << " at " << i;
      }
      if (isa == CpuIsa::kScalar) {
        scalar_result = y;
      } else if (UsesQuantizedActivations(type)) {
        // Quantized types follow one order (ggml's) on every ISA: bit for bit.
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(y[i], scalar_result[i])
              << IsaName(isa) << " vs scalar, " << NameOf(type) << " tokens " << c.tokens
              << " at " << i;
        }
      } else {
        // Float types: only the float summation order differs.
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_NEAR(y[i], scalar_result[i], 1e-5f * scale + 1e-6f)
              << IsaName(isa) << " vs scalar, " << NameOf(type) << " at " << i;
        }
      }
    }
  }
}

TEST_P(MatmulTest, ResultsDoNotDependOnBatchSizeOrThreads) {
  const TensorType type = GetParam();
  const int64_t block = LayoutOf(type).block_size;
  const int64_t rows = 70, cols = block == 1 ? 100 : block == 256 ? 512 : 192, tokens = 19;
  std::mt19937 rng(7);
  const std::vector<uint8_t> data = RandomWeights(type, rows, cols, rng);
  const WeightMatrix w{type, data.data(), rows, cols, cols / block * LayoutOf(type).type_size};
  const std::vector<float> x = RandomActivations(tokens * cols, rng);
  for (CpuIsa isa : SupportedIsas()) {
    ThreadPool three(3);
    std::vector<float> batched(static_cast<size_t>(tokens * rows));
    Matmul(CpuContext{&KernelTable(isa), &three}, w, x.data(), tokens, batched.data());
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<float> alone(static_cast<size_t>(rows));
      Matmul(CpuContext{&KernelTable(isa), nullptr}, w, x.data() + t * cols, 1, alone.data());
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(alone[r], batched[t * rows + r]) << IsaName(isa) << " token " << t << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTest,
                         ::testing::Values(TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                                           TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
                                           TensorType::kQ5_0, TensorType::kQ5_1,
                                           TensorType::kIQ4_NL, TensorType::kMXFP4,
                                           TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ5_K,
                                           TensorType::kQ3_K, TensorType::kQ2_K,
                                           TensorType::kIQ4_XS),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                           return std::string(NameOf(param_info.param));
                         });

// Q4_1 and Q8_0 regrouped 16 rows at a time (kRowGroups16): the same values, their own order
// (matmul.h), the same on every ISA, any token count and any thread split.
TEST(RowGroupsTest, RegroupRowsMovesEveryQuantScaleAndMinimumToItsDocumentedPlace) {
  std::mt19937 rng(3);
  const int64_t rows = 32, cols = 96, row_bytes = cols / 32 * 20;
  const std::vector<uint8_t> data = RandomWeights(TensorType::kQ4_1, rows, cols, rng);
  const WeightMatrix w{TensorType::kQ4_1, data.data(), rows, cols, row_bytes};
  ASSERT_TRUE(CanRegroupRows(w));
  std::vector<uint8_t> storage;
  const WeightMatrix regrouped = RegroupRows(w, storage);
  EXPECT_EQ(regrouped.layout, WeightLayout::kRowGroups16);
  EXPECT_EQ(storage.size(), data.size());
  const auto* groups = reinterpret_cast<const BlockQ4_1x16*>(regrouped.data);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* block = data.data() + r * row_bytes + b * 20;
      const BlockQ4_1x16& g = groups[(r / 16) * (cols / 32) + b];
      const int lane = static_cast<int>(r % 16);
      uint16_t d, m;
      std::memcpy(&d, block, 2);
      std::memcpy(&m, block + 2, 2);
      ASSERT_EQ(g.d[lane], d);
      ASSERT_EQ(g.m[lane], m);
      for (int j = 0; j < 32; ++j) {
        // GGUF: element j < 16 in qs[j]'s low nibble, 16 + j in its high nibble.
        const int expected = j < 16 ? block[4 + j] & 0x0f : block[4 + j - 16] >> 4;
        const int k = (j % 16) / 4, e = j % 4;
        const uint8_t byte = g.qs[k][4 * lane + e];
        ASSERT_EQ(j < 16 ? byte & 0x0f : byte >> 4, expected) << "row " << r << " element " << j;
      }
    }
  }
  const WeightMatrix odd{TensorType::kQ4_1, data.data(), 24, cols, row_bytes};
  EXPECT_FALSE(CanRegroupRows(odd));
  EXPECT_FALSE(CanRegroupRows(regrouped));

  // Q8_0: the signed quants + 128.
  const int64_t q8_row_bytes = cols / 32 * 34;
  const std::vector<uint8_t> q8 = RandomWeights(TensorType::kQ8_0, rows, cols, rng);
  const WeightMatrix w8{TensorType::kQ8_0, q8.data(), rows, cols, q8_row_bytes};
  const WeightMatrix regrouped8 = RegroupRows(w8, storage);
  const auto* groups8 = reinterpret_cast<const BlockQ8_0x16*>(regrouped8.data);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* block = q8.data() + r * q8_row_bytes + b * 34;
      const BlockQ8_0x16& g = groups8[(r / 16) * (cols / 32) + b];
      const int lane = static_cast<int>(r % 16);
      uint16_t d;
      std::memcpy(&d, block, 2);
      ASSERT_EQ(g.d[lane], d);
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(g.qs[j / 4][4 * lane + j % 4] - 128, static_cast<int8_t>(block[2 + j]))
            << "row " << r << " element " << j;
      }
    }
  }
}

class RowGroupsOrderTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(RowGroupsOrderTest, EveryIsaSumsInTheRowGroupOrderBitForBitAndNearGgmls) {
  const TensorType type = GetParam();
  std::mt19937 rng(11);
  ThreadPool pool(3);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 32}, {48, 96}, {320, 576}, {32, 1536}}) {
    const std::vector<uint8_t> data = RandomWeights(type, rows, cols, rng);
    const WeightMatrix w{type, data.data(), rows, cols, cols / 32 * LayoutOf(type).type_size};
    std::vector<uint8_t> storage;
    const WeightMatrix regrouped = RegroupRows(w, storage);
    for (int64_t tokens : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31}) {
      const std::vector<float> x = RandomActivations(tokens * cols, rng);
      const size_t n = static_cast<size_t>(tokens * rows);
      std::vector<float> reference(n), ggml_order(n), scalar(n);
      MatmulReference(w, x.data(), tokens, reference.data());
      Matmul(CpuContext{&KernelTable(CpuIsa::kScalar), nullptr}, w, x.data(), tokens,
             ggml_order.data());
      Matmul(CpuContext{&KernelTable(CpuIsa::kScalar), nullptr}, regrouped, x.data(), tokens,
             scalar.data());
      float scale = 0.0f;
      for (float v : reference) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < n; ++i) {
        // Same int8 activations as ggml's order, so only float rounding differs.
        ASSERT_NEAR(scalar[i], ggml_order[i], 1e-5f * scale) << "tokens " << tokens << " at " << i;
        ASSERT_NEAR(scalar[i], reference[i], 2e-2f * scale) << "tokens " << tokens << " at " << i;
      }
      for (CpuIsa isa : SupportedIsas()) {
        std::vector<float> y(n, NAN);
        Matmul(CpuContext{&KernelTable(isa), &pool}, regrouped, x.data(), tokens, y.data());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(y[i], scalar[i]) << IsaName(isa) << " rows " << rows << " cols " << cols
                                     << " tokens " << tokens << " at " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, RowGroupsOrderTest,
                         ::testing::Values(TensorType::kQ4_1, TensorType::kQ8_0),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                           return std::string(NameOf(param_info.param));
                         });

// Q5_0 regrouped keeps ggml's 8 lanes per row (matmul_row_groups_q5_0.inc): every element in
// its documented place, and every ISA's result bit-identical to the file layout's (ggml's order,
// which ggml_parity_test holds to libggml) for any token count and thread split.
TEST(RowGroupsTest, Q5_0RegroupedEqualsTheFileLayoutBitForBitOnEveryIsa) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 32}, {48, 96}, {320, 640}, {32, 1536}}) {
    const int64_t row_bytes = cols / 32 * 22;
    const std::vector<uint8_t> data = RandomWeights(TensorType::kQ5_0, rows, cols, rng);
    const WeightMatrix w{TensorType::kQ5_0, data.data(), rows, cols, row_bytes};
    ASSERT_TRUE(CanRegroupRows(w));
    std::vector<uint8_t> storage;
    const WeightMatrix regrouped = RegroupRows(w, storage);
    ASSERT_EQ(storage.size(), data.size());
    const auto* groups = reinterpret_cast<const BlockQ5_0x16*>(regrouped.data);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* block = data.data() + r * row_bytes + b * 22;
        const BlockQ5_0x16& g = groups[(r / 16) * (cols / 32) + b];
        const int lane = static_cast<int>(r % 16);
        uint16_t d;
        uint32_t qh;
        std::memcpy(&d, block, 2);
        std::memcpy(&qh, block + 2, 4);
        ASSERT_EQ(g.d[lane], d);
        for (int j = 0; j < 32; ++j) {
          const int low = j < 16 ? block[6 + j] & 0x0f : block[6 + j - 16] >> 4;
          const int k = j / 4, e = j % 4;  // ggml's lane k
          const uint8_t byte = g.qs[k % 4][4 * lane + e];
          ASSERT_EQ(k < 4 ? byte & 0x0f : byte >> 4, low) << "row " << r << " element " << j;
          ASSERT_EQ((g.qh[k] >> (4 * lane + e)) & 1, (qh >> j) & 1) << "row " << r << " element " << j;
        }
      }
    }
    for (int64_t tokens : {1, 2, 3, 5, 8, 9, 16, 17}) {
      const std::vector<float> x = RandomActivations(tokens * cols, rng);
      const size_t n = static_cast<size_t>(tokens * rows);
      for (CpuIsa isa : SupportedIsas()) {
        std::vector<float> file_rows(n, NAN), y(n, NAN);
        Matmul(CpuContext{&KernelTable(isa), &pool}, w, x.data(), tokens, file_rows.data());
        Matmul(CpuContext{&KernelTable(isa), &pool}, regrouped, x.data(), tokens, y.data());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(y[i], file_rows[i]) << IsaName(isa) << " rows " << rows << " cols " << cols
                                        << " tokens " << tokens << " at " << i;
        }
      }
    }
  }
}

// The quant of element e of row `lane`'s block as BlockQ4_Kx16 / BlockQ5_Kx16 / BlockQ6_Kx16
// document it, and as the GGUF block holds it (ggml's dequantize_row_q4_K / q5_K / q6_K).
int GroupedQuant(TensorType type, const uint8_t* group, int lane, int e) {
  if (type == TensorType::kQ4_K || type == TensorType::kQ5_K) {  // BlockQ5_Kx16 is one too
    const auto& g = *reinterpret_cast<const BlockQ4_Kx16*>(group);
    const uint8_t byte = g.qs[e / 64][(e % 32) / 4][4 * lane + e % 4];
    const int low = (e / 32) % 2 == 0 ? byte & 0x0f : byte >> 4;
    if (type == TensorType::kQ4_K) return low;
    const auto& g5 = *reinterpret_cast<const BlockQ5_Kx16*>(group);
    return low | (((g5.qh[(e % 32) / 4][4 * lane + e % 4] >> (e / 32)) & 1) << 4);
  }
  const auto& g = *reinterpret_cast<const BlockQ6_Kx16*>(group);
  const int h = e / 128, j = (e % 128) / 32, l = e % 32, k = l / 4, at = 4 * lane + l % 4;
  const uint8_t low = g.low[h][k + (j % 2 == 1 ? 8 : 0)][at];
  return (j < 2 ? low & 0x0f : low >> 4) | (((g.high[h][k][at] >> (2 * j)) & 3) << 4);
}
int FileQuant(TensorType type, const uint8_t* block, int e) {
  if (type == TensorType::kQ4_K) {
    const uint8_t byte = block[16 + 32 * (e / 64) + e % 32];
    return (e / 32) % 2 == 0 ? byte & 0x0f : byte >> 4;
  }
  if (type == TensorType::kQ5_K) {  // d, dmin, scales[12], qh[32], qs[128]
    const uint8_t byte = block[48 + 32 * (e / 64) + e % 32];
    const int low = (e / 32) % 2 == 0 ? byte & 0x0f : byte >> 4;
    return low | (((block[16 + e % 32] >> (e / 32)) & 1) << 4);
  }
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  const uint8_t low = block[64 * h + 32 * (j % 2) + l];
  return (j < 2 ? low & 0x0f : low >> 4) | (((block[128 + 32 * h + l] >> (2 * j)) & 3) << 4);
}

// Q4_K, Q5_K and Q6_K regrouped (matmul_row_groups_k.inc): every quant, scale and minimum in
// its documented place, the file layout given back byte for byte by UngroupRows, every ISA's
// result bit-identical to the scalar table's (the sub-block order) for any token count and
// thread split, and within float rounding of the file layout's (ggml's order, which
// ggml_parity_test holds to libggml).
class KRowGroupsTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(KRowGroupsTest, RegroupedIsOneOrderOnEveryIsaWithinRoundingOfGgmls) {
  const TensorType type = GetParam();
  const bool with_mins = type == TensorType::kQ4_K || type == TensorType::kQ5_K;
  const int64_t type_size = LayoutOf(type).type_size;
  const size_t group_size = type == TensorType::kQ4_K   ? sizeof(BlockQ4_Kx16)
                            : type == TensorType::kQ5_K ? sizeof(BlockQ5_Kx16)
                                                        : sizeof(BlockQ6_Kx16);
  std::mt19937 rng(7);
  ThreadPool pool(3);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 256}, {48, 512}, {160, 1536}, {32, 2304}}) {
    const int64_t row_bytes = cols / 256 * type_size, blocks = cols / 256;
    const std::vector<uint8_t> data = RandomWeights(type, rows, cols, rng);
    const WeightMatrix w{type, data.data(), rows, cols, row_bytes};
    ASSERT_TRUE(CanRegroupRows(w));
    std::vector<uint8_t> storage;
    const WeightMatrix regrouped = RegroupRows(w, storage);
    ASSERT_EQ(storage.size(), static_cast<size_t>(rows / 16 * blocks) * group_size);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* block = data.data() + r * row_bytes + b * type_size;
        const uint8_t* group = regrouped.data + ((r / 16) * blocks + b) * group_size;
        const int lane = static_cast<int>(r % 16);
        uint16_t d;
        std::memcpy(&d, block + (with_mins ? 0 : 208), 2);
        if (with_mins) {  // BlockQ5_Kx16 is a BlockQ4_Kx16 and its fifth bits
          const auto& g = *reinterpret_cast<const BlockQ4_Kx16*>(group);
          uint16_t dmin;
          std::memcpy(&dmin, block + 2, 2);
          ASSERT_EQ(g.d[lane], d);
          ASSERT_EQ(g.dmin[lane], dmin);
          const uint8_t* packed = block + 4;  // ggml's get_scale_min_k4
          for (int c = 0; c < 8; ++c) {
            const int scale =
                c < 4 ? packed[c] & 63 : (packed[c + 4] & 0xf) | ((packed[c - 4] >> 6) << 4);
            const int min =
                c < 4 ? packed[c + 4] & 63 : (packed[c + 4] >> 4) | ((packed[c] >> 6) << 4);
            ASSERT_EQ(g.scales[c][lane], scale) << "row " << r << " sub-block " << c;
            ASSERT_EQ(g.mins[c][lane], min) << "row " << r << " sub-block " << c;
          }
        } else {
          const auto& g = *reinterpret_cast<const BlockQ6_Kx16*>(group);
          ASSERT_EQ(g.d[lane], d);
          for (int sub = 0; sub < 16; ++sub) {
            ASSERT_EQ(g.scales[sub][lane], static_cast<int8_t>(block[192 + sub]));
          }
        }
        for (int e = 0; e < 256; ++e) {
          ASSERT_EQ(GroupedQuant(type, group, lane, e), FileQuant(type, block, e))
              << "row " << r << " element " << e;
        }
      }
    }
    std::vector<uint8_t> ungrouped(static_cast<size_t>(16 * row_bytes));
    for (int64_t group = 0; group < rows / 16; ++group) {
      UngroupRows(regrouped, group, ungrouped.data());
      ASSERT_EQ(std::memcmp(ungrouped.data(), data.data() + group * 16 * row_bytes,
                            ungrouped.size()), 0)
          << "group " << group;
    }
    for (int64_t tokens : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 21}) {
      const std::vector<float> x = RandomActivations(tokens * cols, rng);
      const size_t n = static_cast<size_t>(tokens * rows);
      std::vector<float> scalar(n, NAN), scalar_grouped(n, NAN);
      const CpuContext scalar_table{&KernelTable(CpuIsa::kScalar), nullptr};
      Matmul(scalar_table, w, x.data(), tokens, scalar.data());
      Matmul(scalar_table, regrouped, x.data(), tokens, scalar_grouped.data());
      // Each block's terms are exact integers scaled once: the two orders part only in the
      // rounding of a few float operations per block, far below 1e-5 of the row's scale.
      float largest = 0.0f;
      for (float v : scalar) largest = std::max(largest, std::fabs(v));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(scalar_grouped[i], scalar[i], 1e-5f * largest) << "at " << i;
      }
      for (CpuIsa isa : SupportedIsas()) {
        std::vector<float> file_rows(n, NAN), y(n, NAN);
        Matmul(CpuContext{&KernelTable(isa), &pool}, w, x.data(), tokens, file_rows.data());
        Matmul(CpuContext{&KernelTable(isa), &pool}, regrouped, x.data(), tokens, y.data());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(file_rows[i], scalar[i]) << IsaName(isa) << " file layout at " << i;
          ASSERT_EQ(y[i], scalar_grouped[i]) << IsaName(isa) << " rows " << rows << " cols "
                                             << cols << " tokens " << tokens << " at " << i;
        }
      }
    }
  }
}

// A loader regroups big matrices a slice of rows at a time (Model::FromFile): slices written
// alone at their groups' offsets make the same bytes as the whole.
TEST(RowGroupsTest, SlicesRegroupedAloneMakeTheWhole) {
  std::mt19937 rng(11);
  for (const TensorType type : {TensorType::kQ4_1, TensorType::kQ8_0, TensorType::kQ5_0,
                                TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    const int64_t rows = 96, cols = 512, row_bytes = cols / LayoutOf(type).block_size *
                                                     LayoutOf(type).type_size;
    const std::vector<uint8_t> data = RandomWeights(type, rows, cols, rng);
    const WeightMatrix w{type, data.data(), rows, cols, row_bytes};
    std::vector<uint8_t> whole;
    RegroupRows(w, whole);
    ASSERT_EQ(static_cast<int64_t>(whole.size()), RegroupedBytes(w));
    std::vector<uint8_t> sliced(whole.size(), 0xab);
    const int64_t group_bytes = RegroupedBytes(w) / (rows / 16);
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 32}, {32, 48},
                                                                            {48, 96}}) {
      WeightMatrix slice = w;
      slice.data = w.data + begin * row_bytes;
      slice.rows = end - begin;
      RegroupRowsInto(slice, sliced.data() + begin / 16 * group_bytes);
    }
    EXPECT_EQ(sliced, whole) << NameOf(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KRowGroupsTest,
                         ::testing::Values(TensorType::kQ4_K, TensorType::kQ5_K,
                                           TensorType::kQ6_K),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                           return std::string(NameOf(param_info.param));
                         });

TEST(MatmulManyTest, EqualsSeparateMatmulsBitForBit) {
  std::mt19937 rng(9);
  const int64_t cols = 256, tokens = 19;
  // The regrouped matrices come after rows that are no multiple of 16: the threads' row
  // ranges must still start on their groups. Q4_K and Q6_K beside Q4_1 and Q8_0 (as Q/K/V of
  // a Q4_K_M file with a fallback type) take both activation formats in one call.
  const std::vector<std::tuple<TensorType, int64_t, bool>> shapes = {
      {TensorType::kQ4_1, 50, false}, {TensorType::kQ8_0, 17, false},
      {TensorType::kF16, 33, false},  {TensorType::kQ4_K, 21, false},
      {TensorType::kQ4_1, 48, true},  {TensorType::kQ6_K, 9, false},
      {TensorType::kQ8_0, 32, true}};
  std::vector<std::vector<uint8_t>> data, regrouped(shapes.size());
  std::vector<WeightMatrix> ws;
  for (const auto& [type, rows, regroup] : shapes) {
    data.push_back(RandomWeights(type, rows, cols, rng));
    const GgmlTypeLayout& layout = LayoutOf(type);
    ws.push_back(
        {type, data.back().data(), rows, cols, cols / layout.block_size * layout.type_size});
    if (regroup) ws.back() = RegroupRows(ws.back(), regrouped[ws.size() - 1]);
  }
  const std::vector<float> x = RandomActivations(tokens * cols, rng);
  ThreadPool pool(3);
  for (CpuIsa isa : SupportedIsas()) {
    const CpuContext ctx{&KernelTable(isa), &pool};
    std::vector<std::vector<float>> together(ws.size()), apart(ws.size());
    std::vector<const WeightMatrix*> w_ptrs;
    std::vector<float*> y_ptrs;
    for (size_t i = 0; i < ws.size(); ++i) {
      together[i].assign(static_cast<size_t>(tokens * ws[i].rows), NAN);
      apart[i].assign(together[i].size(), NAN);
      Matmul(ctx, ws[i], x.data(), tokens, apart[i].data());
      w_ptrs.push_back(&ws[i]);
      y_ptrs.push_back(together[i].data());
    }
    MatmulMany(ctx, w_ptrs, x.data(), tokens, y_ptrs);
    for (size_t i = 0; i < ws.size(); ++i) {
      EXPECT_EQ(together[i], apart[i]) << IsaName(isa) << " matrix " << i;
    }
  }
}

TEST(QuantizeActivationsTest, RoundTripsWithinHalfAStep) {
  std::mt19937 rng(3);
  const std::vector<float> x = RandomActivations(96, rng);
  std::vector<Q8ActivationBlock> blocks(3);
  QuantizeActivations(x.data(), 96, blocks.data());
  for (int b = 0; b < 3; ++b) {
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      EXPECT_NEAR(blocks[b].d * blocks[b].q[i], x[b * 32 + i], blocks[b].d * 0.5f + 1e-7f);
      sum += blocks[b].q[i];
    }
    EXPECT_EQ(sum, blocks[b].sum);
  }
}

TEST(QuantizeActivationsTest, Q8KRoundTripsWithinHalfAStepAndSumsEachSixteen) {
  std::mt19937 rng(5);
  std::vector<float> x = RandomActivations(3 * 256, rng);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
  std::vector<Q8KActivationBlock> blocks(3);
  QuantizeActivationsQ8K(x.data(), static_cast<int64_t>(x.size()), blocks.data());
  EXPECT_EQ(blocks[1].d, 0.0f);
  for (int b = 0; b < 3; ++b) {
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) {
        EXPECT_NEAR(blocks[b].d * blocks[b].q[i], x[b * 256 + i], std::fabs(blocks[b].d) * 0.5f);
        sum += blocks[b].q[i];
      }
      EXPECT_EQ(sum, blocks[b].bsums[j]) << "block " << b << " sum " << j;
    }
  }
}

TEST(QuantizeActivationsTest, EveryIsaIsBitIdenticalToTheScalarOne) {
  std::mt19937 rng(11);
  std::vector<float> x = RandomActivations(32 * 40, rng);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block
  for (int i = 0; i < 32; ++i) x[128 + i] = 0.5f * static_cast<float>(i - 16);  // exact ties
  std::vector<Q8ActivationBlock> expected(40);
  QuantizeActivations(x.data(), static_cast<int64_t>(x.size()), expected.data());
  for (CpuIsa isa : SupportedIsas()) {
    std::vector<Q8ActivationBlock> got(40);
    KernelTable(isa).quantize(x.data(), static_cast<int64_t>(x.size()), got.data());
    for (size_t b = 0; b < got.size(); ++b) {
      EXPECT_EQ(got[b].d, expected[b].d) << IsaName(isa) << " block " << b;
      EXPECT_EQ(got[b].scaled_sum, expected[b].scaled_sum) << IsaName(isa) << " block " << b;
      EXPECT_EQ(got[b].sum, expected[b].sum) << IsaName(isa) << " block " << b;
      EXPECT_EQ(0, std::memcmp(got[b].q, expected[b].q, 32)) << IsaName(isa) << " block " << b;
    }
  }
}

}  // namespace
}  // namespace tokenmill
