// The loop of one paged-attention unit (AttendArgs), written once over an ISA's dot and
// axpy primitives (internal to kernels/cpu; included by each ISA's kernel file).
#pragma once

#include <algorithm>
#include <span>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/half.h"

namespace tokenmill::internal {

// Ops: static DotF16, DotF32, DotI8 (float(const float*, const T*, int64_t)), AxpyF16,
// AxpyF32, AxpyI8 (void(float, const T*, float*, int64_t)), RoundToHalf (float(float),
// round to nearest even) and AccumulateV (out[0..d) = Σ_j p[j] · V row j, in order of j,
// or false when the ISA has no special case for this head size and KV type).
//
// int8 rows are dequantized in registers: the scale of a row multiplies its dot product
// (K) or its probability (V), so Σ q·k·s = s·Σ q·k needs no float copy of the row.
template <typename Ops>
void AttendWith(const AttendArgs& a) {
  const int64_t d = a.head_dim;
  const int64_t row = static_cast<int64_t>(a.n_kv_heads) * d;
  const int64_t len = a.len;
  const bool f16 = a.kv_type == KvType::kF16;
  const bool i8 = a.kv_type == KvType::kInt8;
  // Element offset of position pos's row; its scale (int8) is at offset / d.
  auto offset = [&](int32_t pos) {
    const int64_t slot =
        static_cast<int64_t>(a.blocks[pos / a.block_size]) * a.block_size + pos % a.block_size;
    return slot * row + a.kv_head * d;
  };
  for (int32_t j = 0; j < a.len; ++j) {
    const int64_t off = offset(j);
    for (int g = 0; g < a.group; ++g) {
      const float* qh = a.q_group + g * d;
      float dot;
      if (i8) {
        dot = Ops::DotI8(qh, static_cast<const int8_t*>(a.k) + off, d) * a.k_scale[off / d];
      } else if (f16) {
        dot = Ops::DotF16(qh, static_cast<const uint16_t*>(a.k) + off, d);
      } else {
        dot = Ops::DotF32(qh, static_cast<const float*>(a.k) + off, d);
      }
      a.scores[g * len + j] = dot * a.scale;
    }
  }
  std::fill(a.out_group, a.out_group + a.group * d, 0.0f);
  for (int g = 0; g < a.group; ++g) {
    std::span<float> p(a.scores + g * len, static_cast<size_t>(len));
    SoftmaxInPlace(p);
    if (f16) {
      for (float& v : p) v = Ops::RoundToHalf(v);
    }
  }
  if (Ops::AccumulateV(a, offset)) return;
  for (int32_t j = 0; j < a.len; ++j) {
    const int64_t off = offset(j);
    for (int g = 0; g < a.group; ++g) {
      const float p = a.scores[g * len + j];
      float* out = a.out_group + g * d;
      if (i8) {
        Ops::AxpyI8(p * a.v_scale[off / d], static_cast<const int8_t*>(a.v) + off, out, d);
      } else if (f16) {
        Ops::AxpyF16(p, static_cast<const uint16_t*>(a.v) + off, out, d);
      } else {
        Ops::AxpyF32(p, static_cast<const float*>(a.v) + off, out, d);
      }
    }
  }
}

}  // namespace tokenmill::internal
