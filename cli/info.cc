// `tokenmill info --model PATH`: metadata, the type mix (tensors and bytes per type), a model's
// parameters and KV bytes per token, and the tensor table as JSON.
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <vector>

#include "cli/command.h"
#include "gguf/gguf.h"
#include "model/arch/family.h"
#include "model/config.h"
#include "model/forward_input.h"
#include "model/weights.h"

namespace tokenmill::cli {

int Fail(const Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return 1;
}

namespace {

// What a token's KV takes: its bytes in f16 (only the layers that store KV count) and, for each
// layer, the layer whose KV it reads (itself when it stores).
nlohmann::ordered_json KvCacheInfo(const ModelConfig& c) {
  std::vector<int> reads;
  int storing = 0;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    reads.push_back(c.KvSourceLayer(layer));
    storing += c.StoresKv(layer);
  }
  return {{"bytes_per_token_f16", KvBytesPerToken(c, KvType::kF16, KvType::kF16)},
          {"storing_layers", storing},
          {"layer_reads_kv_of", reads}};
}

int RunInfo(const std::string& model_path) {
  StatusOr<GgufFile> file = GgufFile::Open(model_path);
  if (!file.ok()) return Fail(file.status());
  nlohmann::ordered_json out;
  out["version"] = file->version();
  out["alignment"] = file->alignment();
  nlohmann::ordered_json& metadata = out["metadata"];
  for (const auto& [key, value] : file->metadata()) metadata[std::string(key)] = value.ToString();
  nlohmann::ordered_json& mix = out["type_mix"] = nlohmann::ordered_json::array();
  for (const GgufTypeTotal& total : TypeMix(*file)) {
    mix.push_back({{"type", total.type}, {"tensors", total.tensors}, {"bytes", total.bytes}});
  }
  // A model's parameter counts; a vocabulary-only or unknown file has none.
  if (StatusOr<const ModelFamily*> family = FindModelFamily(*file); family.ok()) {
    if (StatusOr<ModelConfig> config = LoadModelConfig(*file, **family); config.ok()) {
      const ParameterCount count = CountParameters(*file, *config);
      out["parameters"] = {{"total", count.total},
                           {"active_per_token", count.active_per_token},
                           {"experts", config->experts.n_expert},
                           {"experts_per_token", config->experts.n_used}};
      out["kv_cache"] = KvCacheInfo(*config);
    }
  }
  nlohmann::ordered_json& tensors = out["tensors"];
  for (const GgufTensor& t : file->tensors()) {
    const auto layout = FindGgmlType(t.ggml_type);  // the parser accepted only known types
    tensors.push_back({{"name", t.name},
                       {"type", layout->name},
                       {"shape", t.shape},
                       {"offset", t.offset},
                       {"bytes", t.num_bytes}});
  }
  std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace

Command AddInfoCommand(CLI::App& app) {
  auto model_path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("info", "Print a model's metadata and tensors as JSON");
  sub->add_option("--model", *model_path, "GGUF file")->required();
  return {sub, [model_path] { return RunInfo(*model_path); }};
}

}  // namespace tokenmill::cli
