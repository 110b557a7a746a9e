#include "model/weights.h"

#include <string>

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

// A float vector of n elements (norms, biases, frequency factors).
StatusOr<std::span<const float>> Vector(const GgufFile& file, const std::string& name,
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

// A matrix of `rows` outputs by `cols` inputs (ggml shape [cols, rows]).
StatusOr<WeightMatrix> Matrix(const GgufFile& file, const std::string& name, int64_t cols,
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

}  // namespace

StatusOr<ModelWeights> LoadWeights(const GgufFile& file, const ModelConfig& c) {
  ModelWeights w;
  TM_ASSIGN_OR_RETURN(w.token_embd, Matrix(file, "token_embd.weight", c.n_embd, c.n_vocab));
  TM_ASSIGN_OR_RETURN(w.output_norm, Vector(file, "output_norm.weight", c.n_embd));
  if (c.tied_output) {
    w.output = w.token_embd;
  } else {
    TM_ASSIGN_OR_RETURN(w.output, Matrix(file, "output.weight", c.n_embd, c.n_vocab));
  }
  if (file.FindTensor("rope_freqs.weight") != nullptr) {
    TM_ASSIGN_OR_RETURN(w.rope_freqs, Vector(file, "rope_freqs.weight", c.n_rot / 2));
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    TM_ASSIGN_OR_RETURN(l.attn_norm, Vector(file, p + "attn_norm.weight", c.n_embd));
    TM_ASSIGN_OR_RETURN(l.q, Matrix(file, p + "attn_q.weight", c.n_embd, c.q_dim()));
    TM_ASSIGN_OR_RETURN(l.k, Matrix(file, p + "attn_k.weight", c.n_embd, c.kv_dim()));
    TM_ASSIGN_OR_RETURN(l.v, Matrix(file, p + "attn_v.weight", c.n_embd, c.kv_dim()));
    TM_ASSIGN_OR_RETURN(l.o, Matrix(file, p + "attn_output.weight", c.q_dim(), c.n_embd));
    if (c.qkv_bias) {
      TM_ASSIGN_OR_RETURN(l.q_bias, Vector(file, p + "attn_q.bias", c.q_dim()));
      TM_ASSIGN_OR_RETURN(l.k_bias, Vector(file, p + "attn_k.bias", c.kv_dim()));
      TM_ASSIGN_OR_RETURN(l.v_bias, Vector(file, p + "attn_v.bias", c.kv_dim()));
    }
    TM_ASSIGN_OR_RETURN(l.ffn_norm, Vector(file, p + "ffn_norm.weight", c.n_embd));
    TM_ASSIGN_OR_RETURN(l.gate, Matrix(file, p + "ffn_gate.weight", c.n_embd, c.n_ff));
    TM_ASSIGN_OR_RETURN(l.up, Matrix(file, p + "ffn_up.weight", c.n_embd, c.n_ff));
    TM_ASSIGN_OR_RETURN(l.down, Matrix(file, p + "ffn_down.weight", c.n_ff, c.n_embd));
    w.layers.push_back(l);
  }
  return w;
}

}  // namespace tokenmill
