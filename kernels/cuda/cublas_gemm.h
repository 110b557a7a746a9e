// y = x · Wᵀ with cuBLAS over the bf16 copy of a weight (prefill and large batches): x is
// converted to bf16 (f32's range: an f16 activation would overflow past 65504), the product
// accumulates in f32. Rounds differently from Gemv, so a forward pass uses it only where
// batch invariance is not asked for. cuBLAS works in a workspace of its own allocated by
// Init, so it never allocates during a step (nor during a CUDA graph's capture). cuBLAS is loaded by
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

  // cuBLAS's workspace: 32 MiB, what NVIDIA's cuBLAS guide recommends for Hopper.
  static constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;

  // Loads cuBLAS, creates its handle bound to `stream` and gives it its workspace;
  // FailedPrecondition naming the library when it cannot be loaded.
  Status Init(cudaStream_t stream);
  // The bf16 activations of a product over up to `elements` inputs (tokens x cols), reserved
  // now (before the KV pool takes the free memory) instead of on first use.
  Status ReserveActivations(int64_t elements);

  // y[t * w.rows + r] = Σ_c x[t * w.cols + c] · W[r][c]; needs w.bf16.
  Status Multiply(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y);

 private:
  struct Api;  // the library and the functions used
  std::unique_ptr<Api> api_;
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer x_bf16_;
};

}  // namespace tokenmill::cuda
