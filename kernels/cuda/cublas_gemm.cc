#include "kernels/cuda/cublas_gemm.h"

#include "kernels/cuda/cuda_status.h"

namespace tokenmill::cuda {

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

Status CublasGemm::Init(cudaStream_t stream) {
  if (handle_ == nullptr) TM_RETURN_IF_ERROR(CublasStatus(cublasCreate(&handle_), "cublasCreate"));
  stream_ = stream;
  return CublasStatus(cublasSetStream(handle_, stream), "cublasSetStream");
}

Status CublasGemm::Multiply(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y) {
  if (w.f16 == nullptr) return FailedPreconditionError("this weight has no f16 copy for cuBLAS");
  if (n_tokens == 0) return OkStatus();
  TM_RETURN_IF_ERROR(x_f16_.Reserve(n_tokens * w.cols * 2));
  TM_CUDA_RETURN_IF_ERROR(FloatToF16(x, n_tokens * w.cols, x_f16_.as<uint16_t>(), stream_),
                          "converting activations to f16");
  // Column-major views: W's row-major rows x cols is a cols x rows matrix, x a cols x n_tokens
  // one and y a rows x n_tokens one, so y = Wᵀ · x.
  const float alpha = 1.0f;
  const float beta = 0.0f;
  return CublasStatus(
      cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                   static_cast<int>(n_tokens), static_cast<int>(w.cols), &alpha, w.f16, CUDA_R_16F,
                   static_cast<int>(w.cols), x_f16_.data(), CUDA_R_16F, static_cast<int>(w.cols),
                   &beta, y, CUDA_R_32F, static_cast<int>(w.rows), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

}  // namespace tokenmill::cuda
