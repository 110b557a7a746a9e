// Device memory with an owner: cudaMalloc (never managed memory), freed on destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "common/status.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace tokenmill::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // `bytes` of uninitialized device memory; ResourceExhausted when it does not fit.
  static StatusOr<DeviceBuffer> Allocate(int64_t bytes);
  // A device copy of `bytes` bytes at `host`.
  static StatusOr<DeviceBuffer> CopyOf(const void* host, int64_t bytes);
  template <typename T>
  static StatusOr<DeviceBuffer> CopyOf(std::span<const T> host) {
    return CopyOf(host.data(), static_cast<int64_t>(host.size_bytes()));
  }

  // Makes the buffer at least `bytes` long (contents are lost when it grows).
  Status Reserve(int64_t bytes);
  // Sets every byte to zero (synchronous).
  Status Zero();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost): a device-to-host copy into it is one DMA at full
// speed, where one into pageable memory is staged through a driver buffer. Freed on
// destruction.
class PinnedBuffer {
 public:
  // Makes the buffer at least `bytes` long (contents are lost when it grows).
  Status Reserve(int64_t bytes);
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_.get());
  }
  int64_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  int64_t bytes_ = 0;
};

// Copies `bytes` bytes from device memory `src` to device memory `dst`, finished on return
// (ordered before any later work on any stream).
Status CopyDeviceToDevice(void* dst, const void* src, int64_t bytes);

// Queues a copy of `bytes` bytes between any two of host and device memory on `stream` (the
// forward pass's, so that it is ordered with the steps around it) and returns: from pageable
// host memory once the source is staged, into pageable memory once done, and with page-locked
// memory (PinnedBuffer) at once, the copy running while the host goes on (SynchronizeStream
// waits for it).
Status CopyOnStream(void* dst, const void* src, int64_t bytes, CUstream_st* stream);
Status SynchronizeStream(CUstream_st* stream);

// (free, total) bytes of the current device.
StatusOr<std::pair<int64_t, int64_t>> DeviceMemoryInfo();

}  // namespace tokenmill::cuda
