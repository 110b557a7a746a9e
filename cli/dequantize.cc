// `tokenmill dequantize --model PATH --tensor NAME --out FILE`: one tensor as
// little-endian float32 in ggml order, by the reference dequantization.
#include <fstream>
#include <memory>
#include <vector>

#include "cli/command.h"
#include "gguf/gguf.h"
#include "kernels/dequantize.h"

namespace tokenmill::cli {
namespace {

struct DequantizeOptions {
  std::string model_path;
  std::string tensor_name;
  std::string out_path;
};

int RunDequantize(const DequantizeOptions& options) {
  StatusOr<GgufFile> file = GgufFile::Open(options.model_path);
  if (!file.ok()) return Fail(file.status());
  const GgufTensor* tensor = file->FindTensor(options.tensor_name);
  if (tensor == nullptr) {
    return Fail(NotFoundError("the model has no tensor '" + options.tensor_name + "'"));
  }
  const std::optional<TensorType> type = ToTensorType(tensor->ggml_type);
  if (!type || !HasReferenceDequantization(*type)) {
    return Fail(UnimplementedError("tensor '" + options.tensor_name + "' has type " +
                                   std::string(FindGgmlType(tensor->ggml_type)->name) +
                                   ", which tokenmill cannot dequantize"));
  }
  std::vector<float> values(static_cast<size_t>(tensor->num_elements));
  DequantizeReference(*type, tensor->data, values);
  std::ofstream out(options.out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) return Fail(InternalError("cannot write '" + options.out_path + "'"));
  return 0;
}

}  // namespace

Command AddDequantizeCommand(CLI::App& app) {
  auto options = std::make_shared<DequantizeOptions>();
  CLI::App* sub =
      app.add_subcommand("dequantize", "Write one tensor as float32 (reference dequantization)");
  sub->add_option("--model", options->model_path, "GGUF file")->required();
  sub->add_option("--tensor", options->tensor_name, "tensor name")->required();
  sub->add_option("--out", options->out_path, "output file")->required();
  return {sub, [options] { return RunDequantize(*options); }};
}

}  // namespace tokenmill::cli
