#include "kernels/cuda/device_buffer.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "common/byte_size.h"
#include "kernels/cuda/cuda_status.h"

namespace tokenmill::cuda {

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int64_t bytes) {
  DeviceBuffer buffer;
  TM_RETURN_IF_ERROR(buffer.Reserve(bytes));
  return buffer;
}

StatusOr<DeviceBuffer> DeviceBuffer::CopyOf(const void* host, int64_t bytes) {
  TM_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(bytes));
  if (bytes > 0) {
    TM_CUDA_RETURN_IF_ERROR(cudaMemcpy(buffer.data_, host, static_cast<size_t>(bytes),
                                       cudaMemcpyHostToDevice),
                            "copying to the device");
    // From pageable memory cudaMemcpy may return before its DMA lands, and the legacy stream
    // it runs on does not order the forward pass's non-blocking stream: wait for it here.
    TM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "copying to the device");
  }
  return buffer;
}

Status DeviceBuffer::Reserve(int64_t bytes) {
  if (bytes <= bytes_) return OkStatus();
  if (data_ != nullptr) {
    TM_CUDA_RETURN_IF_ERROR(cudaFree(data_), "cudaFree");
    data_ = nullptr;
    bytes_ = 0;
  }
  TM_CUDA_RETURN_IF_ERROR(cudaMalloc(&data_, static_cast<size_t>(bytes)),
                          "cudaMalloc of " + FormatBytes(bytes));
  bytes_ = bytes;
  return OkStatus();
}

Status DeviceBuffer::Zero() {
  if (bytes_ == 0) return OkStatus();
  TM_CUDA_RETURN_IF_ERROR(cudaMemset(data_, 0, static_cast<size_t>(bytes_)), "cudaMemset");
  // The forward pass runs on a non-blocking stream: the zeros must be there before it starts.
  return CudaStatus(cudaDeviceSynchronize(), "cudaMemset");
}

void PinnedBuffer::Free::operator()(void* p) const { cudaFreeHost(p); }

Status PinnedBuffer::Reserve(int64_t bytes) {
  if (bytes <= bytes_) return OkStatus();
  data_.reset();
  bytes_ = 0;
  void* p = nullptr;
  TM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, static_cast<size_t>(bytes)),
                          "cudaMallocHost of " + FormatBytes(bytes));
  data_.reset(p);
  bytes_ = bytes;
  return OkStatus();
}

StatusOr<std::pair<int64_t, int64_t>> DeviceMemoryInfo() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  TM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return std::pair<int64_t, int64_t>(static_cast<int64_t>(free_bytes),
                                     static_cast<int64_t>(total_bytes));
}

namespace {

Status CopySynchronously(void* dst, const void* src, int64_t bytes, cudaMemcpyKind kind,
                         const char* what) {
  if (bytes <= 0) return OkStatus();
  TM_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, static_cast<size_t>(bytes), kind), what);
  // The legacy stream cudaMemcpy runs on does not order the forward pass's stream.
  TM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), what);
  return OkStatus();
}

}  // namespace

Status CopyDeviceToDevice(void* dst, const void* src, int64_t bytes) {
  return CopySynchronously(dst, src, bytes, cudaMemcpyDeviceToDevice,
                           "copying a KV block on the device");
}


Status CopyOnStream(void* dst, const void* src, int64_t bytes, CUstream_st* stream) {
  if (bytes <= 0) return OkStatus();
  return CudaStatus(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream),
      "queueing a KV block copy");
}

Status SynchronizeStream(CUstream_st* stream) {
  return CudaStatus(cudaStreamSynchronize(stream), "waiting for KV block copies");
}

}  // namespace tokenmill::cuda
