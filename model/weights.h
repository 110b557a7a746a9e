// The weights of a llama-family model as views into the GGUF memory map: nothing is
// copied or dequantized at load. Shapes and types are checked against the config.
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/matmul.h"
#include "model/config.h"

namespace tokenmill {

struct LayerWeights {
  std::span<const float> attn_norm;
  WeightMatrix q, k, v, o;
  std::span<const float> q_bias, k_bias, v_bias;  // empty unless config.qkv_bias
  std::span<const float> ffn_norm;
  WeightMatrix gate, up, down;
};

struct ModelWeights {
  WeightMatrix token_embd;  // n_vocab rows of n_embd
  std::span<const float> output_norm;
  WeightMatrix output;  // token_embd when tied
  std::span<const float> rope_freqs;  // empty unless the file has rope_freqs.weight
  std::vector<LayerWeights> layers;
};

StatusOr<ModelWeights> LoadWeights(const GgufFile& file, const ModelConfig& config);

}  // namespace tokenmill
