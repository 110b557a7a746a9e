// The per-ISA kernel tables (internal to kernels/cpu). Each lives in its own file,
// compiled with that ISA's target flags only.
#pragma once

#include "kernels/cpu/matmul.h"

namespace tokenmill::internal {

const CpuKernelTable& ScalarKernelTable();
// Q4_1 or Q8_0 in the kRowGroups16 layout in plain loops: the order every ISA keeps.
void RowGroupsRange(const MatmulRange& m);
#if defined(__x86_64__)
const CpuKernelTable& Avx2KernelTable();
const CpuKernelTable& Avx512VnniKernelTable();
#endif

}  // namespace tokenmill::internal
