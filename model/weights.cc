#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/check.h"
#include "kernels/dequantize.h"
#include "model/arch/family.h"

namespace tokenmill {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StatusOr<const GgufTensor*> Find(const GgufFile& file, const std::string& name,
                                  const std::vector<int64_t>& shape) {
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) {
    return InvalidArgumentError("the model has no tensor '" + name + "' (expected shape " +
                                ShapeString(shape) + ")");
  }
  return t;
}

// token_types may hold several rows (sentence A, B): row 0 is the one every token takes.
Status LoadEncoderInputs(const GgufFile& file, const ModelConfig& c, EncoderInputs& e,
                         F32Copies& copies) {
  if (const GgufTensor* types = file.FindTensor("token_types.weight"); types != nullptr) {
    TM_ASSIGN_OR_RETURN(const WeightMatrix all,
                        LoadMatrix(file, "token_types.weight", c.n_embd,
                                   types->shape.size() == 2 ? types->shape[1] : 1));
    std::vector<float>& row = copies.emplace_back(static_cast<size_t>(c.n_embd));
    DequantizeReference(all.type, all.data, row);
    e.token_type = row;
  }
  if (c.n_rot == 0) {  // learned positions (bert); a roped encoder (nomic-bert) has none
    TM_ASSIGN_OR_RETURN(e.position_embd,
                        LoadMatrix(file, "position_embd.weight", c.n_embd, c.context_length));
  }
  TM_ASSIGN_OR_RETURN(e.norm, LoadVector(file, "token_embd_norm.weight", c.n_embd, copies));
  TM_ASSIGN_OR_RETURN(e.norm_bias, LoadVector(file, "token_embd_norm.bias", c.n_embd, copies));
  return OkStatus();
}

// cls.output's rows are the labels (classifier.output_labels), however many the file has.
Status LoadClassifier(const GgufFile& file, const ModelConfig& c, ClassifierWeights& head,
                      F32Copies& copies) {
  if (file.FindTensor("cls.weight") != nullptr) {
    TM_ASSIGN_OR_RETURN(head.dense, LoadMatrix(file, "cls.weight", c.n_embd, c.n_embd));
    if (file.FindTensor("cls.bias") != nullptr) {
      TM_ASSIGN_OR_RETURN(head.dense_bias, LoadVector(file, "cls.bias", c.n_embd, copies));
    }
  }
  if (const GgufTensor* out = file.FindTensor("cls.output.weight"); out != nullptr) {
    const int64_t labels = out->shape.size() == 2 ? out->shape[1] : 1;
    TM_ASSIGN_OR_RETURN(head.out, LoadMatrix(file, "cls.output.weight", c.n_embd, labels));
    if (file.FindTensor("cls.output.bias") != nullptr) {
      TM_ASSIGN_OR_RETURN(head.out_bias, LoadVector(file, "cls.output.bias", labels, copies));
    }
  }
  return OkStatus();
}

// The tensors of a model: the model-wide ones here, each layer's by its family.
Status LoadAll(const GgufFile& file, const ModelConfig& c, const ModelFamily& family,
               int context, ModelWeights& w, F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(w.token_embd, LoadMatrix(file, "token_embd.weight", c.n_embd, c.n_vocab));
  if (c.encoder) {
    TM_RETURN_IF_ERROR(LoadEncoderInputs(file, c, w.encoder, copies));
  } else {
    TM_ASSIGN_OR_RETURN(w.output_norm, LoadVector(file, "output_norm.weight", c.n_embd, copies));
    if (c.tied_output) {
      w.output = w.token_embd;
    } else {
      TM_ASSIGN_OR_RETURN(w.output, LoadMatrix(file, "output.weight", c.n_embd, c.n_vocab));
    }
  }
  // Llama 3's frequency factors, else LongRoPE's: the long ones when the configured context
  // exceeds the original one (llama_model::get_rope_factors), whatever a sequence's length.
  // llama.cpp rounds the context it is given up to a multiple of 256 first.
  const char* factors = "rope_freqs.weight";
  if (file.FindTensor(factors) == nullptr) {
    const int rounded = (context + 255) / 256 * 256;
    factors = rounded > c.rope_original_context ? "rope_factors_long.weight"
                                                : "rope_factors_short.weight";
  }
  if (file.FindTensor(factors) != nullptr) {
    TM_ASSIGN_OR_RETURN(w.rope_freqs, LoadVector(file, factors, c.n_rot / 2, copies));
  }
  TM_RETURN_IF_ERROR(LoadClassifier(file, c, w.classifier, copies));
  if (c.n_embd_per_layer > 0) {
    PerLayerEmbeddings& p = w.per_layer;
    const int64_t all_layers = int64_t{c.n_layers} * c.n_embd_per_layer;
    p.width = c.n_embd_per_layer;
    TM_ASSIGN_OR_RETURN(p.token_embd,
                        LoadMatrix(file, "per_layer_token_embd.weight", all_layers, c.n_vocab));
    TM_ASSIGN_OR_RETURN(p.model_proj,
                        LoadMatrix(file, "per_layer_model_proj.weight", c.n_embd, all_layers));
    TM_ASSIGN_OR_RETURN(p.proj_norm, LoadVector(file, "per_layer_proj_norm.weight",
                                                c.n_embd_per_layer, copies));
  }
  if (c.altup_streams > 0) {
    // AltUp's projections (gemma3n), one n_embd x n_embd matrix per stream after the first.
    TM_ASSIGN_OR_RETURN(w.altup_proj, LoadExpertMatrices(file, "altup_proj.weight", c.n_embd,
                                                         c.n_embd, c.altup_streams - 1));
    TM_ASSIGN_OR_RETURN(w.altup_unembd_proj,
                        LoadExpertMatrices(file, "altup_unembd_proj.weight", c.n_embd, c.n_embd,
                                           c.altup_streams - 1));
  }
  for (int i = 0; i < c.n_layers; ++i) {
    TM_ASSIGN_OR_RETURN(LayerWeights l, family.load_layer(file, c, i, copies));
    w.layers.push_back(l);
  }
  return OkStatus();
}

}  // namespace

namespace {

// The tensor `name` of `shape` as f32 (a view of an f32 tensor, or an f16/bf16 one converted
// into `copies`): LoadVector and LoadExpertVectors.
StatusOr<std::span<const float>> LoadF32(const GgufFile& file, const std::string& name,
                                         const std::vector<int64_t>& shape, F32Copies& copies) {
  TM_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name, shape));
  const std::optional<TensorType> type = ToTensorType(t->ggml_type);
  if (!type || (*type != TensorType::kF32 && *type != TensorType::kF16 &&
                *type != TensorType::kBF16)) {
    return UnimplementedError("tensor '" + name + "' has type " +
                              std::string(FindGgmlType(t->ggml_type)->name) +
                              "; tokenmill needs norms and biases in f32, f16 or bf16");
  }
  if (t->shape != shape) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeString(t->shape) +
                                ", expected " + ShapeString(shape));
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (*type == TensorType::kF32) {
    return std::span<const float>(reinterpret_cast<const float*>(t->data),
                                  static_cast<size_t>(n));
  }
  std::vector<float>& copy = copies.emplace_back(static_cast<size_t>(n));
  DequantizeReference(*type, t->data, copy);
  return std::span<const float>(copy);
}

}  // namespace

StatusOr<std::span<const float>> LoadVector(const GgufFile& file, const std::string& name,
                                            int64_t n, F32Copies& copies) {
  return LoadF32(file, name, {n}, copies);
}

StatusOr<std::span<const float>> LoadExpertVectors(const GgufFile& file,
                                                   const std::string& name, int64_t n,
                                                   int64_t n_expert, F32Copies& copies) {
  return LoadF32(file, name, {n, n_expert}, copies);
}

namespace {

// The rows of `t` (`name`) as a matrix of shape[0] columns, its other dimensions (which must
// equal `shape`'s) flattened into rows.
StatusOr<WeightMatrix> MatrixOf(const GgufTensor* t, const std::string& name,
                                const std::vector<int64_t>& shape) {
  const std::optional<TensorType> type = ToTensorType(t->ggml_type);
  if (!type || !CpuComputesWith(*type)) {
    // The parser accepted only types whose layout it knows.
    return UnimplementedError("tensor '" + name + "' has type " +
                              std::string(FindGgmlType(t->ggml_type)->name) +
                              ", which tokenmill does not run (supported: " +
                              CpuTensorTypeNames() + ")");
  }
  if (t->shape != shape) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeString(t->shape) +
                                ", expected " + ShapeString(shape));
  }
  const int64_t cols = shape[0];
  int64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
  const GgmlTypeLayout& layout = LayoutOf(*type);
  if (cols % layout.block_size != 0) {  // the parser refuses such files; views may not
    return InvalidArgumentError("tensor '" + name + "' has rows of " + std::to_string(cols) +
                                " elements, not a multiple of the " + std::string(layout.name) +
                                " block size " + std::to_string(layout.block_size));
  }
  return WeightMatrix{*type, t->data, rows, cols, cols / layout.block_size * layout.type_size};
}

}  // namespace

StatusOr<WeightMatrix> LoadMatrix(const GgufFile& file, const std::string& name, int64_t cols,
                                  int64_t rows) {
  TM_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name, {cols, rows}));
  return MatrixOf(t, name, {cols, rows});
}

StatusOr<std::vector<WeightMatrix>> LoadExpertMatrices(const GgufFile& file,
                                                       const std::string& name, int64_t cols,
                                                       int64_t rows, int64_t n_expert) {
  TM_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name, {cols, rows, n_expert}));
  TM_ASSIGN_OR_RETURN(WeightMatrix all, MatrixOf(t, name, {cols, rows, n_expert}));
  std::vector<WeightMatrix> experts;
  for (int64_t e = 0; e < n_expert; ++e) experts.push_back(RowsOf(all, e * rows, rows));
  return experts;
}

StatusOr<WeightMatrix> LoadRowVector(const GgufFile& file, const std::string& name,
                                     int64_t cols) {
  TM_ASSIGN_OR_RETURN(const GgufTensor* t, Find(file, name, {cols}));
  return MatrixOf(t, name, {cols});
}

WeightMatrix RowsOf(const WeightMatrix& w, int64_t begin, int64_t n) {
  TM_CHECK(w.layout == WeightLayout::kRows && begin >= 0 && n >= 0 && begin + n <= w.rows);
  return WeightMatrix{w.type, w.data + begin * w.row_bytes, n, w.cols, w.row_bytes};
}

ParameterCount CountParameters(const GgufFile& file, const ModelConfig& c) {
  ParameterCount count;
  int64_t experts = 0;  // elements of the routed experts' tensors (blk.N.ffn_*_exps.*)
  for (const GgufTensor& t : file.tensors()) {
    count.total += t.num_elements;
    if (t.name.find("_exps.") != std::string_view::npos) experts += t.num_elements;
  }
  const ExpertConfig& e = c.experts;
  count.active_per_token =
      e.n_expert > 0 ? count.total - experts / e.n_expert * (e.n_expert - e.n_used) : count.total;
  return count;
}

StatusOr<ModelWeights> LoadWeights(const GgufFile& file, const ModelConfig& c,
                                   const ModelFamily& family, int context) {
  ModelWeights w;
  F32Copies copies;
  if (Status loaded = LoadAll(file, c, family, context, w, copies); !loaded.ok()) {
    // Which family expected the tensor: a file of another family's tensors says so.
    return Status(loaded.code(), "the " + std::string(family.name) + " model: " +
                                     loaded.message());
  }
  w.f32_copies = std::make_shared<const F32Copies>(std::move(copies));
  return w;
}

std::optional<KeyBiasPeak> LargestKeyBias(const ModelWeights& weights) {
  std::optional<KeyBiasPeak> peak;
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const std::span<const float> bias = weights.layers[l].k_bias;
    if (bias.empty()) continue;
    std::vector<float> abs(bias.size());
    std::transform(bias.begin(), bias.end(), abs.begin(), [](float b) { return std::fabs(b); });
    const float max_abs = *std::max_element(abs.begin(), abs.end());
    if (peak && max_abs <= peak->max_abs) continue;
    std::nth_element(abs.begin(), abs.begin() + std::ssize(abs) / 2, abs.end());
    peak = KeyBiasPeak{static_cast<int>(l), max_abs, abs[abs.size() / 2]};
  }
  return peak;
}

}  // namespace tokenmill
