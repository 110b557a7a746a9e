#include "kernels/dequantize.h"

#include <cstring>

#include "common/check.h"
#include "kernels/dequantize_k_quants.h"
#include "kernels/half.h"

namespace tokenmill {
namespace {

constexpr int64_t kQK = 32;  // elements per block of the block-32 types

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

// The 5-bit quants of Q5_0 / Q5_1: nibbles as Q4_x, the fifth bit of element j is bit j of
// the 32-bit little-endian qh.
void Unpack5BitQuants(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof qh);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1) << 4;
    q[j + kQK / 2] = (qs[j] >> 4) | static_cast<int>((qh >> (j + kQK / 2)) & 1) << 4;
  }
}

// Q5_0: f16 scale d, 4 bytes of fifth bits, 16 bytes of nibbles; x = d * (q - 16).
void DequantizeQ5_0(const uint8_t* block, float* out) {
  const float d = HalfToFloat(LoadU16(block));
  int q[kQK];
  Unpack5BitQuants(block + 2, block + 6, q);
  for (int j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(q[j] - 16);
}

// Q5_1: f16 scale d, f16 minimum m, 4 bytes of fifth bits, 16 bytes of nibbles; x = d * q + m.
void DequantizeQ5_1(const uint8_t* block, float* out) {
  const float d = HalfToFloat(LoadU16(block));
  const float m = HalfToFloat(LoadU16(block + 2));
  int q[kQK];
  Unpack5BitQuants(block + 4, block + 8, q);
  for (int j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(q[j]) + m;
}

// Q8_0: f16 scale d, 32 signed bytes; x = d * q.
void DequantizeQ8_0(const uint8_t* block, float* out) {
  const float d = HalfToFloat(LoadU16(block));
  const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
  for (int j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(qs[j]);
}

// IQ4_NL: f16 scale d, 16 bytes of nibbles (as Q4_0) indexing kIq4NlLevels; x = d * level.
void DequantizeIq4Nl(const uint8_t* block, float* out) {
  const float d = HalfToFloat(LoadU16(block));
  const uint8_t* qs = block + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = d * static_cast<float>(kIq4NlLevels[qs[j] & 0x0f]);
    out[j + kQK / 2] = d * static_cast<float>(kIq4NlLevels[qs[j] >> 4]);
  }
}

// MXFP4: an E8M0 exponent e, 16 bytes of nibbles (as Q4_0) indexing the doubled E2M1 values
// kMxfp4Levels; x = level * 2^(e - 128).
void DequantizeMxfp4(const uint8_t* block, float* out) {
  const float d = E8m0ToFloatHalf(block[0]);
  const uint8_t* qs = block + 1;
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = static_cast<float>(kMxfp4Levels[qs[j] & 0x0f]) * d;
    out[j + kQK / 2] = static_cast<float>(kMxfp4Levels[qs[j] >> 4]) * d;
  }
}

using BlockDequantizer = void (*)(const uint8_t* block, float* out);

// The block function of a quantized type, or nullptr.
BlockDequantizer BlockDequantizerOf(TensorType type) {
  switch (type) {
    case TensorType::kQ4_0: return DequantizeQ4_0;
    case TensorType::kQ4_1: return DequantizeQ4_1;
    case TensorType::kQ5_0: return DequantizeQ5_0;
    case TensorType::kQ5_1: return DequantizeQ5_1;
    case TensorType::kQ8_0: return DequantizeQ8_0;
    case TensorType::kIQ4_NL: return DequantizeIq4Nl;
    case TensorType::kMXFP4: return DequantizeMxfp4;
    default: return KQuantBlockDequantizer(type);
  }
}

bool IsFloat(TensorType type) {
  return type == TensorType::kF32 || type == TensorType::kF16 || type == TensorType::kBF16;
}

}  // namespace

bool HasReferenceDequantization(TensorType type) {
  return IsFloat(type) || BlockDequantizerOf(type) != nullptr;
}

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
    default: break;
  }
  const BlockDequantizer block_fn = BlockDequantizerOf(type);
  TM_CHECK(block_fn != nullptr) << "no dequantization for " << traits.name;
  const int64_t block = traits.block_size;
  for (int64_t b = 0; b < n / block; ++b) block_fn(bytes + b * traits.type_size, out + b * block);
}

}  // namespace tokenmill
