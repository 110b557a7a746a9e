#include "model/cuda/cuda_graph_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/arch/family.h"

namespace tokenmill::cuda {

StatusOr<CudaGraphPlan> PlanCudaGraph(const ModelConfig& c) {
  const std::string& arch = c.arch_name;
  const bool gemma = arch == "gemma" || arch == "gemma2" || arch == "gemma3";
  const bool moe_family = arch == "qwen3moe" || arch == "qwen2moe";
  if (arch != "llama" && arch != "qwen2" && arch != "phi3" && arch != "qwen3" && !gemma &&
      !moe_family) {
    return UnimplementedError("the CUDA forward pass runs 'llama' (Mixtral's experts included), "
                              "'qwen2', 'phi3', 'qwen3', 'gemma', 'gemma2', 'gemma3', "
                              "'qwen3moe' and 'qwen2moe' models, not '" + arch +
                              "': use --device cpu");
  }
  // Of the dense families only llama's graph takes experts (Mixtral), as on the CPU.
  if (c.experts.n_expert > 0 && arch != "llama" && !moe_family) {
    return UnimplementedError("the CUDA forward pass has no mixture-of-experts feed-forward for "
                              "'" + arch + "': use --device cpu");
  }
  if (moe_family && c.experts.n_expert == 0) {
    return InvalidArgumentError("a '" + arch + "' model without experts");
  }
  CudaGraphPlan plan;
  // As the families' graphs: gemma.cc, gemma2.cc, gemma3.cc, qwen3.cc and qwen3moe.cc
  // (qwen2moe's attention is qwen2's, its biases the config's qkv_bias).
  plan.head_norms = arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3";
  plan.experts = c.experts.n_expert > 0;
  plan.post_norms = arch == "gemma2" || arch == "gemma3";
  plan.gelu = gemma;
  if (gemma) {
    plan.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
    plan.query_scale = arch == "gemma2"   ? Gemma2QueryScale(c)
                       : arch == "gemma3" ? Gemma3QueryScale(c)
                                          : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  }
  plan.attn_softcap = c.attn_softcap;
  plan.final_softcap = c.final_softcap;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    CudaLayerPlan l;
    l.rope = LayerRope(c, layer, {});
    const auto base = std::find(plan.rope_bases.begin(), plan.rope_bases.end(), l.rope.freq_base);
    l.rope_table = static_cast<int>(base - plan.rope_bases.begin());
    if (base == plan.rope_bases.end()) plan.rope_bases.push_back(l.rope.freq_base);
    l.sliding_window = c.IsSlidingLayer(layer) ? c.sliding_window : 0;
    plan.layers.push_back(l);
  }
  return plan;
}

}  // namespace tokenmill::cuda
