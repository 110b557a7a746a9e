// GGUF block layouts of the quantized weight types (internal to kernels/cpu).
#pragma once

#include <cstdint>

namespace tokenmill::internal {

// Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble.
struct BlockQ4_0 {
  uint16_t d;  // f16 scale: x = d * (q - 8)
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;  // f16 scale: x = d * q + m
  uint16_t m;  // f16 minimum
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;  // f16 scale: x = d * q
  int8_t qs[32];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);

}  // namespace tokenmill::internal
