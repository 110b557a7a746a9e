// Which instruction sets the CPU kernels may use, detected at run time so one binary
// runs everywhere (no -march=native): scalar, AVX2+FMA+F16C, or AVX-512 with VNNI.
#pragma once

#include <optional>
#include <string_view>

namespace tokenmill {

enum class CpuIsa { kScalar, kAvx2, kAvx512Vnni };

std::string_view IsaName(CpuIsa isa);
// "scalar", "avx2" or "avx512vnni"; nothing for another name.
std::optional<CpuIsa> ParseIsa(std::string_view name);
// Whether this CPU (and this build) can run kernels of `isa`.
bool CpuSupports(CpuIsa isa);
// The fastest ISA this CPU supports.
CpuIsa BestCpuIsa();

}  // namespace tokenmill
