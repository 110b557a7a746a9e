// What the CUDA forward pass runs for a model: the blocks of its family's graph
// (model/arch/<family>.cc) where they differ from llama's, and each layer's RoPE and window,
// derived from the config alone. Host logic, no CUDA: unit-tested on the CPU
// (tests/model/cuda/cuda_graph_plan_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/elementwise.h"
#include "model/config.h"

namespace tokenmill::cuda {

struct CudaLayerPlan {
  // The CPU's LayerRope for the layer (freq_factors left empty: the device reads the
  // uploaded rope_freqs), and the index of its base in CudaGraphPlan::rope_bases.
  RopeParams rope;
  int rope_table = 0;
  int32_t sliding_window = 0;  // > 0: the layer attends to this many most recent positions
};

struct CudaGraphPlan {
  float embed_scale = 1.0f;  // embeddings times this (Gemma's sqrt(n_embd))
  bool head_norms = false;   // RMS norm of each head of Q and K before RoPE (qwen3, gemma3)
  bool post_norms = false;   // RMS norms of the attention's and the FFN's outputs (gemma2, 3)
  bool gelu = false;         // GELU-tanh gated feed-forward (the Gemmas), else SwiGLU
  // Every layer's feed-forward is a mixture of experts (Mixtral, qwen3moe, qwen2moe: routed by
  // ModelConfig::experts on the device, the grouped expert GEMVs, qwen2moe's shared expert).
  bool experts = false;
  // > 0: Q times this after RoPE and q.k scaled by 1, as the Gemmas' graphs; 0: q.k scaled
  // by 1 / sqrt(head_dim) in the attention (llama's, and phi3's equivalent).
  float query_scale = 0.0f;
  float attn_softcap = 0.0f;   // ModelConfig's, as the CPU's blocks read them
  float final_softcap = 0.0f;
  // The distinct RoPE bases of the layers, in the order they first appear: one inv_freq
  // table each on the device.
  std::vector<float> rope_bases;
  std::vector<CudaLayerPlan> layers;
};

// The plan of a llama (dense or Mixtral's mixture of experts), qwen2, phi3, qwen3, gemma,
// gemma2, gemma3, qwen3moe or qwen2moe model; Unimplemented, naming the family and saying to
// use --device cpu, for any other family (gpt-oss among them: MXFP4, attention sinks, biases
// and its clamped SwiGLU have no CUDA kernels).
StatusOr<CudaGraphPlan> PlanCudaGraph(const ModelConfig& config);

}  // namespace tokenmill::cuda
