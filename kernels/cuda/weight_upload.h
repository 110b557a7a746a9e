// Weight matrices copied to the device in the layout its kernels read: the block-32 quantized
// types' rows (Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL) packed with their quants in 16-byte
// words (mmvq_math.h), the K-quants likewise with their scales unpacked (mmvq_kquant_math.h),
// the float types as in the file. Every DeviceWeight of a quantized type the kernels take comes
// from here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {

// rows GGUF rows of `type` (row_bytes apart) in the device layout, on the host: packed rows
// for the quantized types (PackedRowBytes apart), the bytes unchanged otherwise.
// Bytes of one row of `type` in the device layout (row_bytes: the file's, for float types).
int64_t DeviceRowBytes(uint32_t type, int64_t cols, int64_t row_bytes);

std::vector<uint8_t> DeviceLayout(uint32_t type, const uint8_t* data, int64_t rows, int64_t cols,
                                  int64_t row_bytes);

struct UploadedWeight {
  DeviceBuffer buffer;
  DeviceWeight view;  // into buffer; bf16 null
};
StatusOr<UploadedWeight> UploadWeight(uint32_t type, const uint8_t* data, int64_t rows,
                                      int64_t cols, int64_t row_bytes);

// A mixture's experts (GGUF's 3-D ffn_*_exps: experts.size() matrices of one shape, expert e's
// rows at experts[e]) stacked in one buffer, each in the device layout above: view.n_experts
// matrices expert_bytes = rows * DeviceRowBytes apart (a multiple of 16 for the packed types).
// Copied one expert at a time, so the host holds one packed expert, not all.
StatusOr<UploadedWeight> UploadExperts(uint32_t type, std::span<const uint8_t* const> experts,
                                       int64_t rows, int64_t cols, int64_t row_bytes);

}  // namespace tokenmill::cuda
