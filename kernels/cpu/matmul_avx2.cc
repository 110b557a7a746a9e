// AVX2 + FMA + F16C kernels. Only this file is compiled with these target flags
// (kernels/CMakeLists.txt); it runs only after CpuSupports(CpuIsa::kAvx2).
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
#define TM_SIMD_VNNI 0
#include "kernels/cpu/matmul_simd.inc"
#undef TM_SIMD_VNNI
}  // namespace

const CpuKernelTable& Avx2KernelTable() {
  static constexpr CpuKernelTable kTable = {
      CpuIsa::kAvx2, F32Range, F16Range, Bf16Range, Q8_0Range, Q4_0Range, Q4_1Range,
      SimdDotF16,   SimdDotF32, SimdAxpyF16, SimdAxpyF32, Attend, Quantize,
  };
  return kTable;
}

}  // namespace tokenmill::internal
