#include "kernels/cuda/cuda_status.h"

#include <string>

namespace tokenmill::cuda {

Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return OkStatus();
  cudaGetLastError();  // a non-sticky error must not surface again at the next check
  std::string message = std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation) {
    return ResourceExhaustedError(message + "; give the KV cache less memory (--kv-cache-memory)");
  }
  return InternalError(message);
}

Status CublasStatus(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return OkStatus();
  return InternalError(std::string(what) + ": cuBLAS error " + std::to_string(status));
}

}  // namespace tokenmill::cuda
