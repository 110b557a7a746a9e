// CUDA and cuBLAS errors as Status, so nothing on a request's path aborts.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string_view>

#include "common/status.h"

namespace tokenmill::cuda {

// OK for cudaSuccess; otherwise Internal ("<what>: <CUDA's message>"), or ResourceExhausted
// for an allocation that did not fit. Clears CUDA's last-error slot.
Status CudaStatus(cudaError_t err, std::string_view what);
Status CublasStatus(cublasStatus_t status, std::string_view what);

}  // namespace tokenmill::cuda

#define TM_CUDA_RETURN_IF_ERROR(expr, what) \
  TM_RETURN_IF_ERROR(::tokenmill::cuda::CudaStatus((expr), (what)))
