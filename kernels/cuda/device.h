// What CUDA devices this process can use. Plain C++ header: callers need no nvcc.
#pragma once

#include <string>

namespace tokenmill::cuda {

// Number of usable CUDA devices; 0 when there is no GPU or no working driver
// (a machine with the toolkit but no driver answers "driver version is insufficient").
int CountDevices();

// "NVIDIA H200 (sm_90, 139.8 GiB)", or the CUDA error for a bad index.
std::string DescribeDevice(int index);

}  // namespace tokenmill::cuda
