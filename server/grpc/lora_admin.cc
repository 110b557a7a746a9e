#include "server/grpc/lora_admin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

namespace tokenmill::server {
namespace {

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxPathBytes = 1024;

MetricsHttpServer::ActionResult Answer(const Status& status) {
  int http = 500;
  switch (status.code()) {
    case StatusCode::kInvalidArgument: http = 400; break;
    case StatusCode::kNotFound: http = 404; break;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kResourceExhausted: http = 409; break;
    case StatusCode::kUnavailable: http = 503; break;
    default: break;
  }
  return {http, nlohmann::json{{"error", status.message()}}.dump()};
}

// The body's string field `key`: present, a string, 1..max_bytes bytes, no control characters.
StatusOr<std::string> StringField(const nlohmann::json& body, const char* key, size_t max_bytes) {
  const auto it = body.find(key);
  if (it == body.end() || !it->is_string()) {
    return InvalidArgumentError(std::string("give \"") + key + "\" as a string");
  }
  const std::string value = it->get<std::string>();
  const bool printable = std::ranges::all_of(value, [](char c) {
    return static_cast<unsigned char>(c) >= ' ' && c != 0x7f;
  });
  if (value.empty() || value.size() > max_bytes || !printable) {
    return InvalidArgumentError(std::string(key) + " must be 1 to " + std::to_string(max_bytes) +
                                " bytes without control characters");
  }
  return value;
}

StatusOr<nlohmann::json> ParseBody(std::string_view body) {
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return InvalidArgumentError("the body must be a JSON object");
  return json;
}

}  // namespace

StatusOr<std::unique_ptr<LoraAdmin>> LoraAdmin::Create(const std::string& lora_dir,
                                                       std::shared_ptr<LoraTable> table,
                                                       std::vector<std::string> model_names,
                                                       LoraWeights weights, ModelOf model) {
  std::error_code error;
  std::filesystem::path dir = std::filesystem::canonical(lora_dir, error);
  if (error || !std::filesystem::is_directory(dir, error)) {
    return InvalidArgumentError("--lora-dir " + lora_dir + " is not a directory");
  }
  return std::unique_ptr<LoraAdmin>(new LoraAdmin(std::move(dir), std::move(table),
                                                  std::move(model_names), weights,
                                                  std::move(model)));
}

LoraAdmin::LoraAdmin(std::filesystem::path dir, std::shared_ptr<LoraTable> table,
                     std::vector<std::string> model_names, LoraWeights weights, ModelOf model)
    : dir_(std::move(dir)),
      table_(std::move(table)),
      model_names_(std::move(model_names)),
      weights_(weights),
      model_(std::move(model)) {}

std::optional<std::filesystem::path> LoraAdmin::FileInDir(const std::string& path) const {
  std::error_code error;
  // A missing file is not told apart from one outside: the answer says nothing of what lies
  // outside the directory.
  std::filesystem::path file = std::filesystem::canonical(dir_ / path, error);
  if (error) return std::nullopt;
  // Component by component: /loras-old is not inside /loras.
  const auto [d, f] = std::ranges::mismatch(dir_, file);
  if (d != dir_.end() || f == file.end() || !std::filesystem::is_regular_file(file, error)) {
    return std::nullopt;
  }
  return file;
}

MetricsHttpServer::ActionResult LoraAdmin::Load(std::string_view body) {
  std::lock_guard lock(mutex_);
  StatusOr<nlohmann::json> json = ParseBody(body);
  if (!json.ok()) return Answer(json.status());
  StatusOr<std::string> name = StringField(*json, "lora_name", kMaxNameBytes);
  if (!name.ok()) return Answer(name.status());
  StatusOr<std::string> path = StringField(*json, "lora_path", kMaxPathBytes);
  if (!path.ok()) return Answer(path.status());
  if (name->find(' ') != std::string::npos) {
    return Answer(InvalidArgumentError("lora_name must have no spaces"));
  }
  if (std::ranges::find(model_names_, *name) != model_names_.end()) {
    return Answer(FailedPreconditionError("the model is called '" + *name +
                                          "': choose another lora_name"));
  }
  if (const Status room = table_->CheckRoom(*name); !room.ok()) return Answer(room);
  const std::optional<std::filesystem::path> file = FileInDir(*path);
  if (!file.has_value()) {
    return {403, nlohmann::json{{"error", "lora_path must name a file inside --lora-dir " +
                                              dir_.string()}}
                     .dump()};
  }
  const std::shared_ptr<const ServingModel> model = model_();
  if (model == nullptr) return Answer(UnavailableError("the model is not loaded: retry later"));
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<LoraAdapter>> adapter =
      LoraAdapter::Load(file->string(), *model->model, weights_);
  if (!adapter.ok()) {
    return Answer(InvalidArgumentError("lora_path " + *path + ": " + adapter.status().message()));
  }
  const int pairs = (*adapter)->num_pairs();
  const int id = table_->NewId(*name);
  if (const Status added = model->engine->AddLora(id, std::move(*adapter)); !added.ok()) {
    return Answer(added);
  }
  table_->Publish({*name, id, file->string()});
  spdlog::info("LoRA adapter {} loaded at run time: {} matrices adapted, {} ({:.2f} s)", *name,
               pairs, file->string(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return {200, nlohmann::json{{"lora_name", *name}, {"lora_int_id", id}}.dump()};
}

MetricsHttpServer::ActionResult LoraAdmin::Unload(std::string_view body) {
  std::lock_guard lock(mutex_);
  StatusOr<nlohmann::json> json = ParseBody(body);
  if (!json.ok()) return Answer(json.status());
  StatusOr<std::string> name = StringField(*json, "lora_name", kMaxNameBytes);
  if (!name.ok()) return Answer(name.status());
  const StatusOr<int> id = table_->Remove(*name);
  if (!id.ok()) return Answer(id.status());
  // A model that is not loaded holds no adapter: its next load takes the table as it is.
  if (const std::shared_ptr<const ServingModel> model = model_(); model != nullptr) {
    model->engine->RemoveLora(*id);
  }
  spdlog::info("LoRA adapter {} unloaded: new requests for it are refused, running ones finish",
               *name);
  return {200, nlohmann::json{{"lora_name", *name}, {"lora_int_id", *id}}.dump()};
}

}  // namespace tokenmill::server
