// A loaded llama-family model: the mapped GGUF file, its config and weight views.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/weights.h"

namespace tokenmill {

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  // Builds a model over an already opened file (the tokenizer may share it).
  static StatusOr<std::unique_ptr<Model>> FromFile(GgufFile file);

  const GgufFile& file() const { return file_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

 private:
  explicit Model(GgufFile file) : file_(std::move(file)) {}

  GgufFile file_;
  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace tokenmill
