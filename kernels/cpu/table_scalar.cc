// The scalar kernel table: every kernel in plain loops, in the same order of operations as the
// SIMD tables (table_avx2.cc, table_avx512.cc), which are tested against it bit for bit. Built
// without target flags, it runs on any CPU.
#include <algorithm>
#include <cmath>
#include <cstring>
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
#include "kernels/cpu/matmul_row_groups.inc"
#include "kernels/cpu/matmul_row_groups_q5_0.inc"
#include "kernels/cpu/matmul_scalar.inc"
#include "kernels/cpu/elementwise_loops.inc"
#include "kernels/cpu/attend.inc"
#include "kernels/cpu/attend_scalar.inc"
#include "kernels/cpu/quant_k_common.inc"
#include "kernels/cpu/quant_q4_k.inc"
#include "kernels/cpu/quant_q6_k.inc"
#include "kernels/cpu/quant_q5_k.inc"
#include "kernels/cpu/quant_q3_k.inc"
#include "kernels/cpu/quant_q2_k.inc"
#include "kernels/cpu/quant_iq4_xs.inc"
#include "kernels/cpu/matmul_k_quant_scalar.inc"
}  // namespace

const CpuKernelTable& ScalarKernelTable() {
  static constexpr CpuKernelTable kTable = {
      .isa = CpuIsa::kScalar,
      .f32 = PlainFloatRange<F32Format>,
      .f16 = PlainFloatRange<F16Format>,
      .bf16 = PlainFloatRange<Bf16Format>,
      .q8_0 = PlainQuantRange<Q8_0Format>,
      .q4_0 = PlainQuantRange<Q4_0Format>,
      .q4_1 = PlainQuantRange<Q4_1Format>,
      .q5_0 = PlainQuantRange<Q5_0Format>,
      .q5_1 = PlainQuantRange<Q5_1Format>,
      .iq4_nl = PlainQuantRange<Iq4NlFormat>,
      .mxfp4 = PlainQuantRange<Mxfp4Format>,
      .q2_k = PlainKQuantRange<Q2_KFormat>,
      .q3_k = PlainKQuantRange<Q3_KFormat>,
      .q4_k = PlainKQuantRange<Q4_KFormat>,
      .q5_k = PlainKQuantRange<Q5_KFormat>,
      .q6_k = PlainKQuantRange<Q6_KFormat>,
      .iq4_xs = PlainKQuantRange<Iq4_XsFormat>,
      .quantize = QuantizeActivations,
      .attend = AttendWith<ScalarOps>,
      .swiglu = ScalarSwiGlu,
      .softmax_like_ggml = ScalarSoftmaxLikeGgml,
  };
  return kTable;
}

}  // namespace tokenmill::internal
