#include "kernels/dequantize_k_quants.h"

#include <cstring>

#include "kernels/dequantize.h"
#include "kernels/half.h"

namespace tokenmill {
namespace {

constexpr int kQK = 256;

float LoadHalf(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return HalfToFloat(v);
}

// The 6-bit scale and minimum of sub-block j < 8 from the 12 packed bytes of Q4_K and Q5_K
// (ggml's get_scale_min_k4).
void ScaleMinK4(int j, const uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q2_K: scales[16] (low nibble scale, high nibble minimum of 16 elements), qs[64] (2 bits),
// f16 d, f16 dmin; x = d * scale * q - dmin * min.
void DequantizeQ2_K(const uint8_t* block, float* y) {
  const uint8_t* scales = block;
  const uint8_t* q = block + 16;
  const float d = LoadHalf(block + 80);
  const float min = LoadHalf(block + 82);
  int is = 0;
  for (int n = 0; n < kQK; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xf);
        const float ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K: hmask[32] (the high bit, set means +0, clear means -4), qs[64] (low 2 bits), 12 bytes
// of 6-bit scales (minus 32) of 16 elements, f16 d.
void DequantizeQ3_K(const uint8_t* block, float* y) {
  const uint8_t* hm = block;
  const uint8_t* q = block + 32;
  uint32_t aux[4];
  std::memcpy(aux, block + 96, 12);
  const float d_all = LoadHalf(block + 108);
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQK; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
  }
}

// Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and minimums of 32 elements, qs[128]
// (nibbles: the low ones are elements 0..31 of each 64, the high ones 32..63).
void DequantizeQ4_K(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const float min = LoadHalf(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* q = block + 16;
  for (int j = 0; j < 8; j += 2, q += 32) {
    int sc, m;
    ScaleMinK4(j, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    ScaleMinK4(j + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: Q4_K with qh[32] after the scales: bit j of qh[l] is the fifth bit of element
// 32j + l.
void DequantizeQ5_K(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const float min = LoadHalf(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* ql = block + 48;
  for (int j = 0; j < 8; j += 2, ql += 32) {
    int sc, m;
    ScaleMinK4(j, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    ScaleMinK4(j + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((ql[l] & 0xf) + ((qh[l] >> j) & 1 ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] >> (j + 1)) & 1 ? 16 : 0)) - m2;
    }
  }
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] of 16 elements, f16 d;
// x = d * scale * (q - 32).
void DequantizeQ6_K(const uint8_t* block, float* y) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = LoadHalf(block + 208);
  for (int n = 0; n < kQK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

// IQ4_XS: f16 d, scales_h (2 high bits per 32 elements), scales_l[4] (4 low bits), qs[128]
// (nibbles indexing kIq4NlLevels; per 32 elements the low nibbles first).
void DequantizeIq4_Xs(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  uint16_t scales_h;
  std::memcpy(&scales_h, block + 2, 2);
  const uint8_t* scales_l = block + 4;
  const uint8_t* qs = block + 8;
  for (int ib = 0; ib < kQK / 32; ++ib, y += 32, qs += 16) {
    const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4NlLevels[qs[j] & 0xf]);
      y[j + 16] = dl * static_cast<float>(kIq4NlLevels[qs[j] >> 4]);
    }
  }
}

}  // namespace

KQuantBlockFn KQuantBlockDequantizer(TensorType type) {
  switch (type) {
    case TensorType::kQ2_K: return DequantizeQ2_K;
    case TensorType::kQ3_K: return DequantizeQ3_K;
    case TensorType::kQ4_K: return DequantizeQ4_K;
    case TensorType::kQ5_K: return DequantizeQ5_K;
    case TensorType::kQ6_K: return DequantizeQ6_K;
    case TensorType::kIQ4_XS: return DequantizeIq4_Xs;
    default: return nullptr;
  }
}

std::vector<int> KQuantF16Offsets(TensorType type) {
  switch (type) {
    case TensorType::kQ2_K: return {80, 82};
    case TensorType::kQ3_K: return {108};
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: return {0, 2};
    case TensorType::kQ6_K: return {208};
    case TensorType::kIQ4_XS: return {0};
    default: return {};
  }
}

}  // namespace tokenmill
