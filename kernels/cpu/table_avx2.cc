// The AVX2 + FMA + F16C kernel table. Only this file and table_avx512.cc are compiled with
// target flags (kernels/CMakeLists.txt); KernelTable hands it out only after
// CpuSupports(CpuIsa::kAvx2). The .inc files hold the kernels by role and weight type, each
// written once for both SIMD tables (TM_SIMD256) and, where they differ, for this one without
// VNNI (TM_SIMD_VNNI 0).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/dequantize.h"
#include "kernels/half.h"

namespace tokenmill::internal {
namespace {
#define TM_SIMD_VNNI 0
#define TM_SIMD512 0
#include "kernels/cpu/simd_table.inc"
#undef TM_SIMD512
#undef TM_SIMD_VNNI
}  // namespace

const CpuKernelTable& Avx2KernelTable() {
  static constexpr CpuKernelTable kTable = SimdKernelTable(CpuIsa::kAvx2);
  return kTable;
}

}  // namespace tokenmill::internal
