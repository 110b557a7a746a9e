// The weights of a model as views into the GGUF memory map: nothing is copied or
// dequantized at load. Shapes and types are checked against the config. The model-wide
// tensors are loaded here, each layer's by its family (model/arch/).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "kernels/cpu/matmul.h"
#include "model/config.h"

namespace tokenmill {

// The tensors a layer may have (as llama.cpp's llama_layer); its family loads those it uses
// and leaves the others empty.
struct LayerWeights {
  std::span<const float> attn_norm;
  WeightMatrix q, k, v, o;
  std::span<const float> q_bias, k_bias, v_bias;  // qwen2
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

StatusOr<ModelWeights> LoadWeights(const GgufFile& file, const ModelConfig& config,
                                   const ModelFamily& family);

// The f32 vector `name` of n elements (norms, biases, frequency factors).
StatusOr<std::span<const float>> LoadVector(const GgufFile& file, const std::string& name,
                                            int64_t n);
// The matrix `name` of `rows` outputs by `cols` inputs (ggml shape [cols, rows]), of a type
// the kernels compute with.
StatusOr<WeightMatrix> LoadMatrix(const GgufFile& file, const std::string& name, int64_t cols,
                                  int64_t rows);

}  // namespace tokenmill
