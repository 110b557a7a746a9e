// A model family: the models one general.architecture names, and how such a model reads its
// hyper-parameters, loads each layer's tensors and composes its forward graph from the shared
// blocks (model/arch/blocks.h). Each family is a file of its own in this folder (llama.cc,
// qwen2.cc), as in llama.cpp's src/models/; FindModelFamily lists them.
#pragma once

#include <string_view>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/arch/blocks.h"
#include "model/config.h"
#include "model/weights.h"

namespace tokenmill {

struct ModelFamily {
  std::string_view name;  // general.architecture
  // The family's own hyper-parameters, after the keys every family shares (LoadModelConfig);
  // refuses by name what the family cannot run.
  Status (*read_config)(const GgufFile& file, ModelConfig& config);
  // The tensors of layer `layer` (blk.<layer>.*), checked against the config; vectors not in
  // f32 are converted into `f32_copies` (LoadVector).
  StatusOr<LayerWeights> (*load_layer)(const GgufFile& file, const ModelConfig& config,
                                       int layer, F32Copies& f32_copies);
  // One step's graph, from the embedding to the logits.
  void (*forward)(const ModelConfig& config, const ModelWeights& weights, ForwardBlocks& blocks);
};

extern const ModelFamily kLlamaFamily;  // llama.cc: llama, and mistral or smollm GGUFs
extern const ModelFamily kQwen2Family;  // qwen2.cc

// The family of the file's general.architecture; an error naming it if tokenmill runs none.
StatusOr<const ModelFamily*> FindModelFamily(const GgufFile& file);

}  // namespace tokenmill
