// How far the CUDA RoPE kernel (each angle in double, from host-computed inverse frequencies)
// may land from the CPU's ApplyRope (llama.cpp's float recursion of the angle): by the float
// rounding of the angle, which grows with the position. kernel_math_test.cc checks the bound
// on the host over the shapes the GPU test uses; cuda_kernels_test.cc holds the GPU to it.
#pragma once

#include <cstdint>

namespace tokenmill::cuda {

inline float RopeCpuGap(int32_t position) { return 2e-6f * (1.0f + static_cast<float>(position)); }

}  // namespace tokenmill::cuda
