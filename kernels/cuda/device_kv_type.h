// The device kernels' name (DeviceKvType, ops.h) for a KV cache element type: host code only
// (ops.h stays free of kernels/kv_type.h for nvcc).
#pragma once

#include "kernels/cuda/ops.h"
#include "kernels/kv_type.h"

namespace tokenmill::cuda {

inline DeviceKvType ToDeviceKvType(KvType type) {
  switch (type) {
    case KvType::kF16: return DeviceKvType::kF16;
    case KvType::kF32: return DeviceKvType::kF32;
    case KvType::kInt8: return DeviceKvType::kInt8;
    case KvType::kFp8: return DeviceKvType::kFp8;
  }
  return DeviceKvType::kF16;
}

}  // namespace tokenmill::cuda
