// A model's weights copied to device memory (cudaMalloc): every matrix in its file type for
// the quantized/float GEMV kernels, plus, when asked, a dequantized bf16 copy for cuBLAS.
#pragma once

#include <vector>

#include "common/status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"
#include "model/model.h"

namespace tokenmill::cuda {

struct DeviceMatrix {
  DeviceBuffer raw;
  DeviceBuffer bf16;  // empty unless bf16 copies were asked for
  DeviceWeight view;
};

struct DeviceVector {
  DeviceBuffer buffer;
  const float* data() const { return buffer.as<const float>(); }
  bool empty() const { return buffer.bytes() == 0; }
};

struct DeviceLayerWeights {
  DeviceVector attn_norm, ffn_norm, q_bias, k_bias, v_bias;
  // Per-head norms of Q and K (qwen3, gemma3) and Gemma's post-norms, or empty.
  DeviceVector q_norm, k_norm, attn_post_norm, ffn_post_norm;
  DeviceMatrix q, k, v, o, gate, up, down;
};

struct DeviceModelWeights {
  DeviceMatrix token_embd;
  DeviceMatrix output;  // empty buffers when tied: output.view points into token_embd
  DeviceVector output_norm;
  DeviceVector rope_factors;  // Llama 3 frequency divisors, or empty
  std::vector<DeviceLayerWeights> layers;
  int64_t bytes = 0;  // device memory held
};

// Uploads `model`'s weights; with_bf16 also dequantizes each matrix to bf16 on the device.
StatusOr<DeviceModelWeights> UploadWeights(const Model& model, bool with_bf16);

}  // namespace tokenmill::cuda
