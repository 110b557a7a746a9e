// tokenmill: command-line tools over a model file. Results go to stdout as
// JSON (or raw bytes where asked); errors go to stderr with a non-zero exit.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "kernels/dequantize.h"
#include "model/gguf.h"

namespace tokenmill {
namespace {

int Fail(const Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return 1;
}

// `tokenmill info`: metadata and tensor table as JSON.
int RunInfo(const std::string& model_path) {
  StatusOr<GgufFile> file = GgufFile::Open(model_path);
  if (!file.ok()) return Fail(file.status());
  nlohmann::ordered_json out;
  out["version"] = file->version();
  out["alignment"] = file->alignment();
  nlohmann::ordered_json& metadata = out["metadata"];
  for (const auto& [key, value] : file->metadata()) metadata[std::string(key)] = value.ToString();
  nlohmann::ordered_json& tensors = out["tensors"];
  for (const GgufTensor& t : file->tensors()) {
    const auto layout = FindGgmlType(t.ggml_type);
    tensors.push_back({{"name", t.name},
                       {"type", layout ? layout->name : "unknown"},
                       {"shape", t.shape},
                       {"offset", t.offset},
                       {"bytes", t.num_bytes}});
  }
  std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

// `tokenmill dequantize`: one tensor as little-endian float32, row-major (ggml order).
int RunDequantize(const std::string& model_path, const std::string& tensor_name,
                  const std::string& out_path) {
  StatusOr<GgufFile> file = GgufFile::Open(model_path);
  if (!file.ok()) return Fail(file.status());
  const GgufTensor* tensor = file->FindTensor(tensor_name);
  if (tensor == nullptr) return Fail(NotFoundError("the model has no tensor '" + tensor_name + "'"));
  const std::optional<TensorType> type = ToTensorType(tensor->ggml_type);
  if (!type) {
    return Fail(UnimplementedError("tensor '" + tensor_name + "' has type " +
                                   std::string(FindGgmlType(tensor->ggml_type)->name) +
                                   ", which tokenmill cannot dequantize"));
  }
  std::vector<float> values(static_cast<size_t>(tensor->num_elements));
  DequantizeReference(*type, tensor->data, values);
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) return Fail(InternalError("cannot write '" + out_path + "'"));
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  CLI::App app{"tokenmill: tools over GGUF model files"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");

  std::string model_path;
  CLI::App* info = app.add_subcommand("info", "Print a model's metadata and tensors as JSON");
  info->add_option("--model", model_path, "GGUF file")->required();

  std::string tensor_name;
  std::string out_path;
  CLI::App* dequantize =
      app.add_subcommand("dequantize", "Write one tensor as float32 (reference dequantization)");
  dequantize->add_option("--model", model_path, "GGUF file")->required();
  dequantize->add_option("--tensor", tensor_name, "tensor name")->required();
  dequantize->add_option("--out", out_path, "output file")->required();

  CLI11_PARSE(app, argc, argv);
  if (const tokenmill::Status s = tokenmill::SetupLogging(log_level); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 2;
  }
  if (*info) return tokenmill::RunInfo(model_path);
  if (*dequantize) return tokenmill::RunDequantize(model_path, tensor_name, out_path);
  return 2;
}
