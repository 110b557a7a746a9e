#include "kernels/cuda/cublas_gemm.h"

#include <dlfcn.h>

#include <string>

#include "kernels/cuda/cuda_status.h"

namespace tokenmill::cuda {

struct CublasGemm::Api {
  ~Api() {
    if (library != nullptr) dlclose(library);
  }

  void* library = nullptr;
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t) = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                         const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                         int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                         cublasGemmAlgo_t) = nullptr;
};

namespace {

// The sonames of the toolkits whose API this code was written against, newest first.
constexpr const char* kCublasLibraries[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};

template <typename Fn>
Status Resolve(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (fn == nullptr) return FailedPreconditionError(std::string("cuBLAS lacks ") + name);
  return OkStatus();
}

}  // namespace

CublasGemm::CublasGemm() = default;

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) api_->destroy(handle_);
}

Status CublasGemm::Init(cudaStream_t stream) {
  if (api_ == nullptr) {
    auto api = std::make_unique<Api>();
    for (const char* name : kCublasLibraries) {
      api->library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (api->library != nullptr) break;
    }
    if (api->library == nullptr) {
      return FailedPreconditionError(
          "cannot load cuBLAS (libcublas.so.13 or .12): install it, or leave "
          "--cublas-min-tokens at 0 so every product runs in tokenmill's own kernels");
    }
    TM_RETURN_IF_ERROR(Resolve(api->library, "cublasCreate_v2", api->create));
    TM_RETURN_IF_ERROR(Resolve(api->library, "cublasDestroy_v2", api->destroy));
    TM_RETURN_IF_ERROR(Resolve(api->library, "cublasSetStream_v2", api->set_stream));
    TM_RETURN_IF_ERROR(Resolve(api->library, "cublasSetWorkspace_v2", api->set_workspace));
    TM_RETURN_IF_ERROR(Resolve(api->library, "cublasGemmEx", api->gemm));
    api_ = std::move(api);
  }
  if (handle_ == nullptr) TM_RETURN_IF_ERROR(CublasStatus(api_->create(&handle_), "cublasCreate"));
  stream_ = stream;
  TM_RETURN_IF_ERROR(CublasStatus(api_->set_stream(handle_, stream), "cublasSetStream"));
  TM_RETURN_IF_ERROR(workspace_.Reserve(kWorkspaceBytes));
  return CublasStatus(api_->set_workspace(handle_, workspace_.data(),
                                          static_cast<size_t>(workspace_.bytes())),
                      "cublasSetWorkspace");
}

Status CublasGemm::ReserveActivations(int64_t elements) {
  return x_bf16_.Reserve(elements * 2);
}

Status CublasGemm::Multiply(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y) {
  if (w.bf16 == nullptr) return FailedPreconditionError("this weight has no bf16 copy for cuBLAS");
  if (n_tokens == 0) return OkStatus();
  TM_RETURN_IF_ERROR(ReserveActivations(n_tokens * w.cols));
  TM_CUDA_RETURN_IF_ERROR(FloatToBf16(x, n_tokens * w.cols, x_bf16_.as<uint16_t>(), stream_),
                          "converting activations to bf16");
  // Column-major views: W's row-major rows x cols is a cols x rows matrix, x a cols x n_tokens
  // one and y a rows x n_tokens one, so y = Wᵀ · x.
  const float alpha = 1.0f;
  const float beta = 0.0f;
  return CublasStatus(
      api_->gemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                 static_cast<int>(n_tokens), static_cast<int>(w.cols), &alpha, w.bf16, CUDA_R_16BF,
                 static_cast<int>(w.cols), x_bf16_.data(), CUDA_R_16BF, static_cast<int>(w.cols),
                 &beta, y, CUDA_R_32F, static_cast<int>(w.rows), CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

}  // namespace tokenmill::cuda
