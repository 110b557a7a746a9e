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
#define TM_SIMD256 1
#define TM_SIMD_VNNI 0
#include "kernels/cpu/simd256.inc"
#include "kernels/cpu/quant_q4_0.inc"
#include "kernels/cpu/quant_q4_1.inc"
#include "kernels/cpu/quant_q8_0.inc"
#include "kernels/cpu/quant_q5_0.inc"
#include "kernels/cpu/quant_q5_1.inc"
#include "kernels/cpu/quant_iq4_nl.inc"
#include "kernels/cpu/quant_mxfp4.inc"
#include "kernels/cpu/float_f32.inc"
#include "kernels/cpu/float_f16.inc"
#include "kernels/cpu/float_bf16.inc"
#include "kernels/cpu/activations_simd256.inc"
#include "kernels/cpu/matmul_simd256.inc"
#include "kernels/cpu/matmul_row_groups.inc"
#include "kernels/cpu/matmul_row_groups_q5_0.inc"
#include "kernels/cpu/matmul_simd_ranges.inc"
#include "kernels/cpu/elementwise_loops.inc"
#include "kernels/cpu/elementwise_simd256.inc"
#include "kernels/cpu/attend.inc"
#include "kernels/cpu/attend_simd256.inc"
#include "kernels/cpu/quant_k_common.inc"
#include "kernels/cpu/quant_q4_k.inc"
#include "kernels/cpu/quant_q6_k.inc"
#include "kernels/cpu/quant_q5_k.inc"
#include "kernels/cpu/quant_q3_k.inc"
#include "kernels/cpu/quant_q2_k.inc"
#include "kernels/cpu/quant_iq4_xs.inc"
#include "kernels/cpu/matmul_k_quant_simd.inc"
#undef TM_SIMD_VNNI
#undef TM_SIMD256
}  // namespace

const CpuKernelTable& Avx2KernelTable() {
  static constexpr CpuKernelTable kTable = {
      .isa = CpuIsa::kAvx2,
      .f32 = FloatRange<F32Kernel>,
      .f16 = FloatRange<FloatKernel<F16Format>>,
      .bf16 = FloatRange<FloatKernel<Bf16Format>>,
      .q8_0 = QuantRange<Q8_0Format>,
      .q4_0 = QuantRange<Q4_0Format>,
      .q4_1 = QuantRange<Q4_1Format>,
      .q5_0 = QuantRange<Q5_0Format>,
      .q5_1 = QuantRange<Q5_1Format>,
      .iq4_nl = QuantRange<Iq4NlFormat>,
      .mxfp4 = QuantRange<Mxfp4Format>,
      .q2_k = KQuantRange<Q2_KFormat>,
      .q3_k = KQuantRange<Q3_KFormat>,
      .q4_k = KQuantRange<Q4_KFormat>,
      .q5_k = KQuantRange<Q5_KFormat>,
      .q6_k = KQuantRange<Q6_KFormat>,
      .iq4_xs = KQuantRange<Iq4_XsFormat>,
      .quantize = SimdQuantizeActivations,
      .attend = AttendWith<SimdOps>,
      .swiglu = SimdSwiGlu,
      .softmax_like_ggml = SimdSoftmaxLikeGgml,
  };
  return kTable;
}

}  // namespace tokenmill::internal
