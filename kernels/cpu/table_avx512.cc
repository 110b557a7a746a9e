// The AVX-512 VL/BW + VNNI kernel table: the kernels of table_avx2.cc with dpbusd for
// maddubs+madd (TM_SIMD_VNNI 1), 512-bit tiles where they are faster, 16 rows per row-group
// tile. Only this file and table_avx2.cc are compiled with target flags
// (kernels/CMakeLists.txt); KernelTable hands it out only after CpuSupports(kAvx512Vnni).
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
#define TM_SIMD_VNNI 1
#define TM_SIMD512 1
#include "kernels/cpu/simd_table.inc"
#undef TM_SIMD512
#undef TM_SIMD_VNNI
}  // namespace

const CpuKernelTable& Avx512VnniKernelTable() {
  static constexpr CpuKernelTable kTable = SimdKernelTable(CpuIsa::kAvx512Vnni);
  return kTable;
}

}  // namespace tokenmill::internal
