// AVX-512 VL/BW + VNNI (256-bit vectors) kernels. Only this file is compiled with these target flags
// (kernels/CMakeLists.txt); it runs only after CpuSupports(CpuIsa::kAvx512Vnni).
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*(), which its uninitialized-use
// warnings flag wherever they are inlined (a GCC bug, not in this code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/attend_impl.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/half.h"

namespace tokenmill::internal {
namespace {
#define TM_SIMD_VNNI 1
#include "kernels/cpu/matmul_simd.inc"
#undef TM_SIMD_VNNI
}  // namespace

const CpuKernelTable& Avx512VnniKernelTable() {
  static constexpr CpuKernelTable kTable = {
      CpuIsa::kAvx512Vnni, F32Range, F16Range, Bf16Range, Q8_0Range, Q4_0Range, Q4_1Range,
      SimdDotF16,   SimdDotF32, SimdAxpyF16, SimdAxpyF32, Attend, Quantize,
  };
  return kTable;
}

}  // namespace tokenmill::internal
