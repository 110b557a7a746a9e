// A model's weights copied to device memory (cudaMalloc): every matrix in its file type for
// the quantized/float GEMV kernels, plus, when asked, a dequantized bf16 copy for cuBLAS.
#pragma once

#include <unordered_map>
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

// A mixture-of-experts feed-forward (MoeWeights): the router, each of gate, up and down as one
// DeviceWeight of n_expert stacked matrices (UploadExperts: view.n_experts, expert_bytes), and
// qwen2moe's shared expert with its one-row gate (empty buffers when none).
// qwen2moe's shared expert with its one-row gate, deepseek2's without one (shared_gate_inp
// empty: added as it is); DeepSeek-V3's selection bias (exp_probs_b) or empty.
struct DeviceMoeWeights {
  DeviceMatrix router, gate, up, down;
  DeviceMatrix shared_gate, shared_up, shared_down, shared_gate_inp;
  DeviceVector selection_bias;
  bool has_shared() const { return shared_gate.view.rows > 0; }
  bool shared_gated() const { return shared_gate_inp.view.rows > 0; }
};

// Multi-head latent attention (LatentAttentionWeights, deepseek2): the query's LoRA (q_a, its
// norm, q_b) or a plain q, kv_a and the latent's norm, and each head's k_b and v_b as one
// DeviceWeight of n_heads stacked matrices each (UploadExperts: the heads are the grouped
// GEMV's experts), from views of the file's 3-D tensors or the f32 copies older files get.
struct DeviceLatentAttentionWeights {
  DeviceMatrix q_a, q_b, q, kv_a, k_b, v_b;
  DeviceVector q_a_norm, kv_a_norm;
};

struct DeviceLayerWeights {
  DeviceVector attn_norm, ffn_norm, q_bias, k_bias, v_bias;
  // Per-head norms of Q and K (qwen3, gemma3) and Gemma's post-norms, or empty.
  DeviceVector q_norm, k_norm, attn_post_norm, ffn_post_norm;
  DeviceMatrix q, k, v, o, gate, up, down;  // gate, up, down: dense feed-forwards only
  DeviceMoeWeights moe;                     // ModelConfig::HasExperts(layer)
  DeviceLatentAttentionWeights mla;         // ModelConfig::mla
};

struct DeviceModelWeights {
  DeviceMatrix token_embd;
  DeviceMatrix output;  // empty buffers when tied: output.view points into token_embd
  DeviceVector output_norm;
  DeviceVector rope_factors;  // Llama 3 frequency divisors, or empty
  std::vector<DeviceLayerWeights> layers;
  int64_t bytes = 0;  // device memory held
};

// Where the device copy of each host matrix, vector and mixture of ModelWeights lies, keyed
// by the host object (a vector by its data): what a family's graph passes to the blocks
// finds its device twin (CudaForwardBlocks).
struct DeviceWeightIndex {
  std::unordered_map<const WeightMatrix*, const DeviceWeight*> matrices;
  std::unordered_map<const float*, const float*> vectors;
  std::unordered_map<const MoeWeights*, const DeviceMoeWeights*> mixtures;
  std::unordered_map<const LatentAttentionWeights*, const DeviceLatentAttentionWeights*> latent;
};
// The index of `host` (what UploadWeights read) into `device` (which must stay where it is).
DeviceWeightIndex IndexWeights(const ModelWeights& host, const DeviceModelWeights& device);

// Uploads `model`'s weights; with_bf16 also dequantizes each matrix to bf16 on the device (not
// the experts: they only run in the grouped GEMV).
StatusOr<DeviceModelWeights> UploadWeights(const Model& model, bool with_bf16);

}  // namespace tokenmill::cuda
