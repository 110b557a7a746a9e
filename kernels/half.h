// IEEE half and bfloat16 <-> float, bit exact, for the scalar reference paths.
#pragma once

#include <bit>
#include <cstdint>

namespace tokenmill {

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf or nan
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// Round to nearest even, as the F16C instruction does.
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan (keep nan a nan)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to inf
  if (abs < 0x38800000u) {  // subnormal half (or zero)
    const float magic = std::bit_cast<float>(0x3f000000u);  // 0.5: aligns the subnormal bits
    const float v = std::bit_cast<float>(abs) + magic;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(v) - 0x3f000000u));
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u) - (112u << 23);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Half the value of an E8M0 scale (2^(e - 127) / 2 = 2^(e - 128)), as ggml's
// ggml_e8m0_to_fp32_half: MXFP4's levels are stored doubled. e < 2 are float subnormals; e = 255
// (NaN in OCP's format) is 2^127 here as there.
inline float E8m0ToFloatHalf(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

}  // namespace tokenmill
