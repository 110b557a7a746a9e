#include "model/weights.h"

#include <string>

#include "model/arch/family.h"

namespace tokenmill {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StatusOr<const GgufTensor*> Find(const GgufFile& file, const std::string& name) {
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) return InvalidArgumentError("the model has no tensor '" + name + "'");
  return t;
}

}  // namespace

StatusOr<std::span<const float>> LoadVector(const GgufFile& file, const std::string& name,
                                            int64_t n) {
  TM_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name));
  if (t->ggml_type != static_cast<uint32_t>(TensorType::kF32)) {
    return UnimplementedError("tensor '" + name + "' has type " +
                              std::string(FindGgmlType(t->ggml_type)->name) +
                              "; tokenmill needs norms and biases in f32");
  }
  if (t->shape.size() != 1 || t->shape[0] != n) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeString(t->shape) +
                                ", expected [" + std::to_string(n) + "]");
  }
  return std::span<const float>(reinterpret_cast<const float*>(t->data), static_cast<size_t>(n));
}

StatusOr<WeightMatrix> LoadMatrix(const GgufFile& file, const std::string& name, int64_t cols,
                                  int64_t rows) {
  TM_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name));
  const std::optional<TensorType> type = ToTensorType(t->ggml_type);
  if (!type) {
    const auto layout = FindGgmlType(t->ggml_type);
    return UnimplementedError("tensor '" + name + "' has type " +
                              std::string(layout ? layout->name : "unknown") +
                              ", which tokenmill cannot compute with (supported: f32, f16, bf16, "
                              "q8_0, q4_0, q4_1)");
  }
  if (t->shape.size() != 2 || t->shape[0] != cols || t->shape[1] != rows) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeString(t->shape) +
                                ", expected [" + std::to_string(cols) + ", " +
                                std::to_string(rows) + "]");
  }
  const GgmlTypeLayout& layout = LayoutOf(*type);
  if (cols % layout.block_size != 0) {
    return InvalidArgumentError("tensor '" + name + "' rows are not whole blocks");
  }
  return WeightMatrix{*type, t->data, rows, cols, cols / layout.block_size * layout.type_size};
}

StatusOr<ModelWeights> LoadWeights(const GgufFile& file, const ModelConfig& c,
                                   const ModelFamily& family) {
  ModelWeights w;
  TM_ASSIGN_OR_RETURN(w.token_embd, LoadMatrix(file, "token_embd.weight", c.n_embd, c.n_vocab));
  TM_ASSIGN_OR_RETURN(w.output_norm, LoadVector(file, "output_norm.weight", c.n_embd));
  if (c.tied_output) {
    w.output = w.token_embd;
  } else {
    TM_ASSIGN_OR_RETURN(w.output, LoadMatrix(file, "output.weight", c.n_embd, c.n_vocab));
  }
  if (file.FindTensor("rope_freqs.weight") != nullptr) {
    TM_ASSIGN_OR_RETURN(w.rope_freqs, LoadVector(file, "rope_freqs.weight", c.n_rot / 2));
  }
  for (int i = 0; i < c.n_layers; ++i) {
    TM_ASSIGN_OR_RETURN(LayerWeights l, family.load_layer(file, c, i));
    w.layers.push_back(l);
  }
  return w;
}

}  // namespace tokenmill
