// y = x · Wᵀ with cuBLAS over the f16 copy of a weight (prefill and large batches): x is
// converted to f16, the product accumulates in f32. Rounds differently from Gemv, so a
// forward pass uses it only where batch invariance is not asked for. cuBLAS is loaded by
// Init (dlopen), not linked: binaries start, and run every other path, on a machine without
// it (the bare GPU machines scripts/gpu-bundle is for).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "common/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {

class CublasGemm {
 public:
  CublasGemm();
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // Loads cuBLAS and creates its handle bound to `stream`; FailedPrecondition naming the
  // library when it cannot be loaded.
  Status Init(cudaStream_t stream);

  // y[t * w.rows + r] = Σ_c x[t * w.cols + c] · W[r][c]; needs w.f16.
  Status Multiply(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y);

 private:
  struct Api;  // the library and the functions used
  std::unique_ptr<Api> api_;
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer x_f16_;
};

}  // namespace tokenmill::cuda
