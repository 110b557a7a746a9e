// Hand-built blocks with values worked out from the ggml block layouts.
// (Real tensors of both models are checked against the gguf package in tests/model.)
#include "kernels/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/half.h"

namespace tokenmill {
namespace {

void PutHalf(std::vector<uint8_t>& bytes, size_t at, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(bytes.data() + at, &h, 2);
}

TEST(DequantizeTest, Q4_0UsesLowNibblesFirstAndAnOffsetOfEight) {
  std::vector<uint8_t> block(18);
  PutHalf(block, 0, 0.5f);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>((15 - j) << 4 | j);
  std::vector<float> out(32);
  DequantizeReference(TensorType::kQ4_0, block.data(), out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(out[16 + j], 0.5f * (15 - j - 8)) << j;
  }
}

TEST(DequantizeTest, Q4_1AddsTheBlockMinimum) {
  std::vector<uint8_t> block(20);
  PutHalf(block, 0, 0.25f);
  PutHalf(block, 2, -1.0f);
  for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<uint8_t>(0xf0 | j);
  std::vector<float> out(32);
  DequantizeReference(TensorType::kQ4_1, block.data(), out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * j - 1.0f);
    EXPECT_EQ(out[16 + j], 0.25f * 15 - 1.0f);
  }
}

TEST(DequantizeTest, Q8_0IsSignedBytesTimesScale) {
  std::vector<uint8_t> blocks(2 * 34);
  for (int b = 0; b < 2; ++b) {
    PutHalf(blocks, b * 34, b == 0 ? 2.0f : -0.125f);
    for (int j = 0; j < 32; ++j) blocks[b * 34 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  }
  std::vector<float> out(64);
  DequantizeReference(TensorType::kQ8_0, blocks.data(), out);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 16));
    EXPECT_EQ(out[32 + j], -0.125f * (j - 16));
  }
}

// Fifth bits: element j takes bit j of the little-endian qh.
void PutFifthBits(std::vector<uint8_t>& block, size_t at, uint32_t qh) {
  std::memcpy(block.data() + at, &qh, 4);
}

TEST(DequantizeTest, Q5_0TakesElementJsFifthBitFromBitJAndAnOffsetOfSixteen) {
  std::vector<uint8_t> block(22);
  PutHalf(block, 0, 0.5f);
  PutFifthBits(block, 2, 0x8000'0001u | 1u << 17);  // elements 0, 17 and 31
  for (int j = 0; j < 16; ++j) block[6 + j] = static_cast<uint8_t>((15 - j) << 4 | j);
  std::vector<float> out(32);
  DequantizeReference(TensorType::kQ5_0, block.data(), out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * (j + (j == 0 ? 16 : 0) - 16)) << j;
    const int high = j == 1 || j == 15 ? 16 : 0;
    EXPECT_EQ(out[16 + j], 0.5f * (15 - j + high - 16)) << j;
  }
}

TEST(DequantizeTest, Q5_1AddsTheBlockMinimumToFiveBitQuants) {
  std::vector<uint8_t> block(24);
  PutHalf(block, 0, 0.25f);
  PutHalf(block, 2, -2.0f);
  PutFifthBits(block, 4, 0xffff'0000u);  // elements 16..31
  for (int j = 0; j < 16; ++j) block[8 + j] = static_cast<uint8_t>(j << 4 | j);
  std::vector<float> out(32);
  DequantizeReference(TensorType::kQ5_1, block.data(), out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * j - 2.0f) << j;
    EXPECT_EQ(out[16 + j], 0.25f * (j + 16) - 2.0f) << j;
  }
}

TEST(DequantizeTest, Iq4NlLooksNibblesUpInItsSixteenLevels) {
  // ggml's kvalues_iq4nl, written out here rather than taken from the header.
  const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                          1,    13,   25,  38,  53,  69,  89,  113};
  std::vector<uint8_t> block(18);
  PutHalf(block, 0, 0.125f);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>((15 - j) << 4 | j);
  std::vector<float> out(32);
  DequantizeReference(TensorType::kIQ4_NL, block.data(), out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.125f * levels[j]) << j;
    EXPECT_EQ(out[16 + j], 0.125f * levels[15 - j]) << j;
  }
}

TEST(DequantizeTest, Mxfp4ScalesDoubledE2M1ValuesByAPowerOfTwo) {
  // ggml's kvalues_mxfp4 (E2M1 doubled), written out here rather than taken from the header.
  const int levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  std::vector<uint8_t> block(17);
  for (int j = 0; j < 16; ++j) block[1 + j] = static_cast<uint8_t>((15 - j) << 4 | j);
  std::vector<float> out(32);
  // e = 130: x = level * 2^(130 - 128); e = 1 and 0: the float subnormals 2^-127 and 2^-128.
  for (auto [e, half_scale] : {std::pair{130, 4.0f}, std::pair{127, 0.5f},
                               std::pair{1, std::ldexp(1.0f, -127)},
                               std::pair{0, std::ldexp(1.0f, -128)}}) {
    block[0] = static_cast<uint8_t>(e);
    DequantizeReference(TensorType::kMXFP4, block.data(), out);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(out[j], half_scale * static_cast<float>(levels[j])) << e << " " << j;
      EXPECT_EQ(out[16 + j], half_scale * static_cast<float>(levels[15 - j])) << e << " " << j;
    }
  }
}

TEST(DequantizeTest, FloatTypes) {
  const uint16_t halves[] = {0x3c00, 0xc000, 0x3555};
  const uint16_t bf16s[] = {0x3f80, 0xc140, 0x0000};
  const float floats[] = {1.5f, -0.0f, 3e38f};
  std::vector<float> out(3);
  DequantizeReference(TensorType::kF16, halves, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, HalfToFloat(0x3555)}));
  DequantizeReference(TensorType::kBF16, bf16s, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -12.0f, 0.0f}));
  DequantizeReference(TensorType::kF32, floats, out);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -0.0f, 3e38f}));
}

TEST(TensorTypeTest, LayoutsOfSupportedAndUnsupportedTypes) {
  EXPECT_EQ(LayoutOf(TensorType::kQ4_1).type_size, 20);
  EXPECT_EQ(NameOf(TensorType::kBF16), "bf16");
  ASSERT_TRUE(FindGgmlType(14).has_value());
  EXPECT_EQ(FindGgmlType(14)->name, "q6_k");
  EXPECT_EQ(ToTensorType(14), TensorType::kQ6_K);
  ASSERT_TRUE(FindGgmlType(16).has_value());
  EXPECT_EQ(FindGgmlType(16)->name, "iq2_xxs");
  EXPECT_FALSE(ToTensorType(16).has_value());  // known layout, but not computed with
  EXPECT_EQ(ToTensorType(20), TensorType::kIQ4_NL);
  EXPECT_EQ(ToTensorType(39), TensorType::kMXFP4);
  EXPECT_EQ(LayoutOf(TensorType::kMXFP4).type_size, 17);
  EXPECT_EQ(LayoutOf(TensorType::kQ5_1).type_size, 24);
  for (TensorType type : AllTensorTypes()) {
    EXPECT_TRUE(HasReferenceDequantization(type)) << NameOf(type);
  }
  EXPECT_FALSE(FindGgmlType(4).has_value());   // retired q4_2
  EXPECT_FALSE(FindGgmlType(1000).has_value());
}

}  // namespace
}  // namespace tokenmill
