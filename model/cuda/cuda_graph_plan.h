// What the CUDA blocks (cuda_blocks.h) run of a model: its family's graph (model/arch/<family>.cc)
// traced once on the host over blocks that only record each call, every block checked against
// the kernels the CUDA pass has, and each layer's RoPE and window, derived from the config.
// Host logic, no CUDA: unit-tested on the CPU (tests/model/cuda/cuda_graph_plan_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/elementwise.h"
#include "model/arch/family.h"
#include "model/arch/forward_blocks.h"
#include "model/config.h"
#include "model/weights.h"

namespace tokenmill::cuda {

// How the CUDA attention takes a QueryScale: q times query_scale (1: untouched, so no
// rounding) and q·k times score_scale.
struct CudaAttentionScales {
  float query_scale = 1.0f;
  float score_scale = 1.0f;
};
CudaAttentionScales AttentionScalesOnCuda(const ModelConfig& config, QueryScale scale);

struct CudaLayerPlan {
  // The CPU's LayerRope for the layer (freq_factors left empty: the device reads the
  // uploaded rope_freqs), and the index of its base in CudaGraphPlan::rope_bases.
  RopeParams rope;
  int rope_table = 0;
  int32_t sliding_window = 0;  // > 0: the layer attends to this many most recent positions
  CudaAttentionScales attention;  // of the layer's Attention block
};

// One block the family's graph calls: its ForwardBlocks method, and its layer (-1 outside).
struct CudaBlockCall {
  std::string block;
  int layer = -1;
};

struct CudaGraphPlan {
  std::vector<CudaBlockCall> blocks;  // in the order the graph calls them
  bool gelu = false;  // a GeluFeedForward: GeluTanhGlu's table goes to the device
  // The distinct RoPE bases of the layers, in the order they first appear: one inv_freq
  // table each on the device.
  std::vector<float> rope_bases;
  std::vector<CudaLayerPlan> layers;
};

// The plan of `family`'s graph over `weights` (the model's, in the file's layout). A block
// the CUDA pass has no kernel for is refused as Unimplemented naming each such block and what
// it lacks (e.g. "Attention (attention sinks)"), the model's architecture and --device cpu;
// a MoeFeedForward in a model without experts is InvalidArgument.
StatusOr<CudaGraphPlan> PlanCudaGraph(const ModelFamily& family, const ModelConfig& config,
                                      const ModelWeights& weights);

}  // namespace tokenmill::cuda
