#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/dequantize.h"
#include "kernels/half.h"

namespace tokenmill {
namespace {

// A base matrix LoRA may adapt: its GGUF name and where each weight set holds it.
struct Adaptable {
  std::string name;
  const WeightMatrix* file_layout;  // in base.weights()
  const WeightMatrix* cpu_layout;   // in base.cpu_weights()
};

std::vector<Adaptable> AdaptableMatrices(const Model& base) {
  constexpr std::pair<std::string_view, WeightMatrix LayerWeights::*> kLayer[] = {
      {"attn_q", &LayerWeights::q},       {"attn_k", &LayerWeights::k},
      {"attn_v", &LayerWeights::v},       {"attn_output", &LayerWeights::o},
      {"ffn_gate", &LayerWeights::gate},  {"ffn_up", &LayerWeights::up},
      {"ffn_down", &LayerWeights::down}};
  const ModelWeights& file = base.weights();
  const ModelWeights& cpu = base.cpu_weights();
  std::vector<Adaptable> all;
  for (size_t layer = 0; layer < file.layers.size(); ++layer) {
    for (const auto& [name, member] : kLayer) {
      if ((file.layers[layer].*member).rows == 0) continue;
      all.push_back({"blk." + std::to_string(layer) + "." + std::string(name) + ".weight",
                     &(file.layers[layer].*member), &(cpu.layers[layer].*member)});
    }
  }
  if (file.output.rows > 0 && !base.config().tied_output) {
    all.push_back({"output.weight", &file.output, &cpu.output});
  }
  return all;
}

Status CheckHeader(const GgufFile& file, const Model& base, const std::string& path) {
  const StatusOr<std::string_view> type = file.GetString("general.type");
  if (!type.ok() || *type != "adapter") {
    return InvalidArgumentError(path + " is no adapter (its general.type is not 'adapter')");
  }
  TM_ASSIGN_OR_RETURN(const std::string_view kind, file.GetString("adapter.type"));
  if (kind != "lora") {
    return InvalidArgumentError(path + " is a '" + std::string(kind) +
                                "' adapter: tokenmill loads LoRA adapters");
  }
  if (file.Has("adapter.alora.invocation_tokens")) {
    return UnimplementedError(path + " is an aLoRA adapter (adapter.alora.invocation_tokens): "
                              "tokenmill loads plain LoRA adapters only");
  }
  TM_ASSIGN_OR_RETURN(const std::string_view arch, file.GetString("general.architecture"));
  if (arch != base.config().arch_name) {
    return InvalidArgumentError(path + " adapts a " + std::string(arch) + " model; this one is " +
                                base.config().arch_name);
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<LoraAdapter>> LoraAdapter::Load(const std::string& path,
                                                         const Model& base, LoraWeights weights) {
  TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  TM_RETURN_IF_ERROR(CheckHeader(file, base, path));
  TM_ASSIGN_OR_RETURN(const float alpha, file.GetF32("adapter.lora.alpha"));
  std::unique_ptr<LoraAdapter> adapter(new LoraAdapter(std::move(file)));
  const GgufFile& f = adapter->file_;
  std::set<std::string, std::less<>> used;
  for (const Adaptable& m : AdaptableMatrices(base)) {
    const std::string a_name = m.name + ".lora_a", b_name = m.name + ".lora_b";
    const GgufTensor* a = f.FindTensor(a_name);
    const GgufTensor* b = f.FindTensor(b_name);
    if (a == nullptr && b == nullptr) continue;
    if (a == nullptr || b == nullptr || a->shape.size() != 2 || b->shape.size() != 2) {
      return InvalidArgumentError(path + ": " + m.name + " needs a 2-D .lora_a and .lora_b");
    }
    const int64_t rank = a->shape[1];
    TM_ASSIGN_OR_RETURN(const WeightMatrix a_file,
                        LoadMatrix(f, a_name, m.file_layout->cols, rank));
    TM_ASSIGN_OR_RETURN(const WeightMatrix b_file,
                        LoadMatrix(f, b_name, rank, m.file_layout->rows));
    if (weights == LoraWeights::kQ8_0 && a_file.cols % 32 != 0) {
      return InvalidArgumentError(path + ": " + m.name + " has " + std::to_string(a_file.cols) +
                                  " inputs, not whole Q8_0 blocks of 32: use f32 LoRA weights");
    }
    LoraPair pair;
    pair.a = adapter->Converted(a_file, weights);
    pair.rank = rank;
    pair.scale = alpha != 0.0f ? alpha / static_cast<float>(rank) : 1.0f;
    adapter->Transposed(b_file, weights == LoraWeights::kQ8_0 || b_file.type == TensorType::kF16,
                        pair);
    adapter->by_base_data_[m.file_layout->data] = pair;
    adapter->by_base_data_[m.cpu_layout->data] = pair;
    used.insert(a_name);
    used.insert(b_name);
    ++adapter->num_pairs_;
  }
  for (const GgufTensor& tensor : f.tensors()) {
    if (!used.contains(tensor.name)) {
      return UnimplementedError(path + ": " + std::string(tensor.name) +
                                " adapts nothing tokenmill applies LoRA to (the layers' "
                                "attention and feed-forward matrices and the output head)");
    }
  }
  if (adapter->num_pairs_ == 0) return InvalidArgumentError(path + " adapts no matrix");
  return adapter;
}

WeightMatrix LoraAdapter::Converted(const WeightMatrix& w, LoraWeights weights) {
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeReference(w.type, w.data + r * w.row_bytes,
                        std::span<float>(values).subspan(static_cast<size_t>(r * cols),
                                                         static_cast<size_t>(cols)));
  }
  std::vector<uint8_t>& data = converted_.emplace_back();
  if (weights == LoraWeights::kF32) {
    data.resize(values.size() * sizeof(float));
    std::memcpy(data.data(), values.data(), data.size());
    return WeightMatrix{.type = TensorType::kF32,
                        .data = data.data(),
                        .rows = rows,
                        .cols = cols,
                        .row_bytes = cols * static_cast<int64_t>(sizeof(float))};
  }
  // Q8_0 blocks of 32: an f16 scale amax / 127, then the 32 values rounded to multiples of it.
  constexpr int64_t kBlockBytes = 2 + 32;
  const int64_t row_bytes = cols / 32 * kBlockBytes;
  data.resize(static_cast<size_t>(rows * row_bytes));
  for (int64_t block = 0; block < rows * cols / 32; ++block) {
    const float* x = values.data() + block * 32;
    uint8_t* out = data.data() + block * kBlockBytes;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t half = FloatToHalf(d);
    std::memcpy(out, &half, sizeof(half));
    for (int i = 0; i < 32; ++i) {
      out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[i] * inverse)));
    }
  }
  return WeightMatrix{.type = TensorType::kQ8_0,
                      .data = data.data(),
                      .rows = rows,
                      .cols = cols,
                      .row_bytes = row_bytes};
}

void LoraAdapter::Transposed(const WeightMatrix& w, bool f16, LoraPair& pair) {
  const size_t count = static_cast<size_t>(w.rows * w.cols);
  std::vector<float> row(static_cast<size_t>(w.cols));
  std::vector<uint8_t>& data =
      converted_.emplace_back(count * (f16 ? sizeof(uint16_t) : sizeof(float)));
  auto* out32 = reinterpret_cast<float*>(data.data());
  auto* out16 = reinterpret_cast<uint16_t*>(data.data());
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeReference(w.type, w.data + r * w.row_bytes, std::span<float>(row));
    for (int64_t c = 0; c < w.cols; ++c) {
      const float value = row[static_cast<size_t>(c)];
      if (f16) {
        out16[c * w.rows + r] = FloatToHalf(value);
      } else {
        out32[c * w.rows + r] = value;
      }
    }
  }
  if (f16) {
    pair.b_transposed_f16 = {out16, count};
  } else {
    pair.b_transposed = {out32, count};
  }
}

const LoraPair* LoraAdapter::Find(const WeightMatrix& w) const {
  const auto it = by_base_data_.find(w.data);
  return it == by_base_data_.end() ? nullptr : &it->second;
}

}  // namespace tokenmill
