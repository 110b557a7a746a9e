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
#include "kernels/cpu/weight_formats.inc"
#include "kernels/cpu/matmul_row_groups.inc"
#include "kernels/cpu/matmul_row_groups_q5_0.inc"
#include "kernels/cpu/matmul_scalar.inc"
#include "kernels/cpu/elementwise_loops.inc"
#include "kernels/cpu/attend.inc"
#include "kernels/cpu/attend_scalar.inc"
#include "kernels/cpu/matmul_row_groups_k.inc"
#include "kernels/cpu/matmul_k_quant_scalar.inc"

template <typename Format>
constexpr MatmulRangeFn kFloatEntry = PlainFloatRange<Format>;
template <typename Format>
constexpr MatmulRangeFn kBlockEntry = PlainQuantRange<Format>;
template <typename Format>
constexpr MatmulRangeFn kKQuantEntry = PlainKQuantRange<Format>;
#include "kernels/cpu/table_entries.inc"

constexpr CpuKernelTable MakeScalarTable() {
  CpuKernelTable table{};
  table.isa = CpuIsa::kScalar;
  table.quantize = QuantizeActivations;
  table.quantize_q8k = QuantizeActivationsQ8K;
  table.attend = AttendRunWith<ScalarOps>;
  table.attend_run_tokens = [](int, int) { return 1; };
  table.swiglu = ScalarSwiGlu;
  table.softmax_like_ggml = ScalarSoftmaxLikeGgml;
  table.gelu_tanh_glu = GeluTanhGlu;
  table.add_low_rank = LoopAddLowRank<float>;
  table.add_low_rank_f16 = LoopAddLowRank<uint16_t>;
  FillMatmulEntries(table);
  return table;
}
}  // namespace

const CpuKernelTable& ScalarKernelTable() {
  static constexpr CpuKernelTable kTable = MakeScalarTable();
  return kTable;
}

}  // namespace tokenmill::internal
