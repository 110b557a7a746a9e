// Loading and unloading LoRA adapters while the server runs, as vLLM's admin routes do:
// POST /v1/load_lora_adapter {"lora_name": NAME, "lora_path": PATH} and
// POST /v1/unload_lora_adapter {"lora_name": NAME}, on the metrics port behind --api-key
// (server/metrics/metrics_http_server.h), with --lora-dir. PATH (relative to --lora-dir, or
// absolute) must resolve, symbolic links followed, to a file inside --lora-dir. A loaded
// adapter is a model name at once (GenerateRequest.model, GetModelInfo, the gateway's next
// health check); an unloaded one refuses new requests at once while those running with it
// finish (Engine::RemoveLora).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/lora.h"
#include "server/grpc/lora_table.h"
#include "server/grpc/serving_model.h"
#include "server/metrics/metrics_http_server.h"

namespace tokenmill::server {

class LoraAdmin {
 public:
  // The model the adapters adapt, while it is loaded (null otherwise).
  using ModelOf = std::function<std::shared_ptr<const ServingModel>()>;

  // `lora_dir` must be a directory (InvalidArgument naming --lora-dir otherwise);
  // `model_names` are names an adapter may not take.
  static StatusOr<std::unique_ptr<LoraAdmin>> Create(const std::string& lora_dir,
                                                     std::shared_ptr<LoraTable> table,
                                                     std::vector<std::string> model_names,
                                                     LoraWeights weights, ModelOf model);

  MetricsHttpServer::ActionResult Load(std::string_view body);
  MetricsHttpServer::ActionResult Unload(std::string_view body);

 private:
  LoraAdmin(std::filesystem::path dir, std::shared_ptr<LoraTable> table,
            std::vector<std::string> model_names, LoraWeights weights, ModelOf model);
  // The regular file `path` names inside the directory; none when it names no such file.
  std::optional<std::filesystem::path> FileInDir(const std::string& path) const;

  const std::filesystem::path dir_;  // canonical
  const std::shared_ptr<LoraTable> table_;
  const std::vector<std::string> model_names_;
  const LoraWeights weights_;
  const ModelOf model_;
  std::mutex mutex_;  // one load or unload at a time
};

}  // namespace tokenmill::server
