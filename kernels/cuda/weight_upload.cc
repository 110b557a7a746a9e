#include "kernels/cuda/weight_upload.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/mmvq_math.h"

namespace tokenmill::cuda {

int64_t DeviceRowBytes(uint32_t type, int64_t cols, int64_t row_bytes) {
  if (IsKQuant(type)) return KPackedRowBytes(type, cols);
  return IsQuantized(type) ? PackedRowBytes(type, cols) : row_bytes;
}

std::vector<uint8_t> DeviceLayout(uint32_t type, const uint8_t* data, int64_t rows, int64_t cols,
                                  int64_t row_bytes) {
  if (!TakesQ8_1(type)) return std::vector<uint8_t>(data, data + rows * row_bytes);
  const int64_t packed_bytes = DeviceRowBytes(type, cols, row_bytes);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * packed_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* out = packed.data() + r * packed_bytes;
    if (IsKQuant(type)) {
      KPackRow(type, data + r * row_bytes, cols, out);
    } else {
      PackRow(type, data + r * row_bytes, cols, out);
    }
  }
  return packed;
}

namespace {

Status CheckBlocks(uint32_t type, int64_t cols) {
  if (IsQuantized(type) && cols % kQuantBlock != 0) {
    return InvalidArgumentError("a quantized weight's rows must hold whole blocks of 32");
  }
  if (IsKQuant(type) && cols % kKBlock != 0) {
    return InvalidArgumentError("a K-quant weight's rows must hold whole blocks of 256");
  }
  return OkStatus();
}

}  // namespace

StatusOr<UploadedWeight> UploadWeight(uint32_t type, const uint8_t* data, int64_t rows,
                                      int64_t cols, int64_t row_bytes) {
  TM_RETURN_IF_ERROR(CheckBlocks(type, cols));
  UploadedWeight u;
  const std::vector<uint8_t> host = DeviceLayout(type, data, rows, cols, row_bytes);
  TM_ASSIGN_OR_RETURN(u.buffer, DeviceBuffer::CopyOf(host.data(),
                                                     static_cast<int64_t>(host.size())));
  u.view = DeviceWeight{type, u.buffer.as<const uint8_t>(), rows, cols,
                        DeviceRowBytes(type, cols, row_bytes), nullptr};
  return u;
}

StatusOr<UploadedWeight> UploadExperts(uint32_t type, std::span<const uint8_t* const> experts,
                                       int64_t rows, int64_t cols, int64_t row_bytes) {
  TM_RETURN_IF_ERROR(CheckBlocks(type, cols));
  if (experts.empty()) return InvalidArgumentError("a mixture needs at least one expert");
  const int64_t expert_bytes = rows * DeviceRowBytes(type, cols, row_bytes);
  UploadedWeight u;
  TM_ASSIGN_OR_RETURN(u.buffer,
                      DeviceBuffer::Allocate(expert_bytes * static_cast<int64_t>(experts.size())));
  for (size_t e = 0; e < experts.size(); ++e) {
    const std::vector<uint8_t> host = DeviceLayout(type, experts[e], rows, cols, row_bytes);
    TM_CUDA_RETURN_IF_ERROR(cudaMemcpy(u.buffer.as<uint8_t>() + e * expert_bytes, host.data(),
                                       host.size(), cudaMemcpyHostToDevice),
                            "copying an expert to the device");
  }
  u.view = DeviceWeight{type, u.buffer.as<const uint8_t>(), rows, cols,
                        DeviceRowBytes(type, cols, row_bytes), nullptr,
                        static_cast<int32_t>(experts.size()), expert_bytes};
  return u;
}

}  // namespace tokenmill::cuda
