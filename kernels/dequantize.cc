#include "kernels/dequantize.h"

#include <cstring>

#include "common/check.h"
#include "kernels/half.h"

namespace tokenmill {
namespace {

constexpr int64_t kQK = 32;  // elements per block of the Q4_0 / Q4_1 / Q8_0 types

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Q4_0: f16 scale d, 16 bytes of nibbles; x = d * (q - 8). Low nibbles are
// elements 0..15, high nibbles 16..31.
void DequantizeQ4_0(const uint8_t* block, float* out) {
  const float d = HalfToFloat(LoadU16(block));
  const uint8_t* qs = block + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = d * static_cast<float>((qs[j] & 0x0f) - 8);
    out[j + kQK / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Q4_1: f16 scale d, f16 minimum m, 16 bytes of nibbles; x = d * q + m.
void DequantizeQ4_1(const uint8_t* block, float* out) {
  const float d = HalfToFloat(LoadU16(block));
  const float m = HalfToFloat(LoadU16(block + 2));
  const uint8_t* qs = block + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
    out[j + kQK / 2] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// Q8_0: f16 scale d, 32 signed bytes; x = d * q.
void DequantizeQ8_0(const uint8_t* block, float* out) {
  const float d = HalfToFloat(LoadU16(block));
  const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
  for (int j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(qs[j]);
}

}  // namespace

void DequantizeReference(TensorType type, const void* src, std::span<float> dst) {
  const GgmlTypeLayout& traits = LayoutOf(type);
  const auto n = static_cast<int64_t>(dst.size());
  TM_CHECK_EQ(n % traits.block_size, 0) << "partial block of " << traits.name;
  const auto* bytes = static_cast<const uint8_t*>(src);
  float* out = dst.data();
  switch (type) {
    case TensorType::kF32:
      std::memcpy(out, bytes, n * sizeof(float));
      return;
    case TensorType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(LoadU16(bytes + 2 * i));
      return;
    case TensorType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(LoadU16(bytes + 2 * i));
      return;
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ8_0: {
      void (*block_fn)(const uint8_t*, float*) = type == TensorType::kQ4_0   ? DequantizeQ4_0
                                                 : type == TensorType::kQ4_1 ? DequantizeQ4_1
                                                                             : DequantizeQ8_0;
      for (int64_t b = 0; b < n / kQK; ++b) block_fn(bytes + b * traits.type_size, out + b * kQK);
      return;
    }
  }
  TM_CHECK(false) << "no dequantization for " << traits.name;
}

}  // namespace tokenmill
