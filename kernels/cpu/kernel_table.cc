#include "kernels/cpu/kernel_table.h"

#include "common/check.h"

namespace tokenmill {

const CpuKernelTable& KernelTable(CpuIsa isa) {
  TM_CHECK(CpuSupports(isa)) << "this CPU cannot run " << IsaName(isa) << " kernels";
  switch (isa) {
#if defined(TOKENMILL_SIMD_KERNELS)
    case CpuIsa::kAvx2: return internal::Avx2KernelTable();
    case CpuIsa::kAvx512Vnni: return internal::Avx512VnniKernelTable();
#endif
    default: return internal::ScalarKernelTable();
  }
}

}  // namespace tokenmill
