#include "kernels/cuda/weight_upload.h"

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

StatusOr<UploadedWeight> UploadWeight(uint32_t type, const uint8_t* data, int64_t rows,
                                      int64_t cols, int64_t row_bytes) {
  if (IsQuantized(type) && cols % kQuantBlock != 0) {
    return InvalidArgumentError("a quantized weight's rows must hold whole blocks of 32");
  }
  if (IsKQuant(type) && cols % kKBlock != 0) {
    return InvalidArgumentError("a K-quant weight's rows must hold whole blocks of 256");
  }
  UploadedWeight u;
  const std::vector<uint8_t> host = DeviceLayout(type, data, rows, cols, row_bytes);
  TM_ASSIGN_OR_RETURN(u.buffer, DeviceBuffer::CopyOf(host.data(),
                                                     static_cast<int64_t>(host.size())));
  u.view = DeviceWeight{type, u.buffer.as<const uint8_t>(), rows, cols,
                        DeviceRowBytes(type, cols, row_bytes), nullptr};
  return u;
}

}  // namespace tokenmill::cuda
