// tokenmill-server: the gRPC API (tokenmill.v1.Inference, health, reflection) over the
// engine, with Prometheus metrics on --metrics-port.
//
// Life: listen (health NOT_SERVING) -> load the default model -> SERVING -> SIGTERM/SIGINT ->
// NOT_SERVING, refuse new Generate calls, let in-flight ones finish (up to --drain-timeout,
// then abort them) -> exit 0.
#include <fmt/format.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cache/kv_memory_budget.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "common/url_query.h"
#include "server/grpc/grpc_listener.h"
#include "server/grpc/inference_service.h"
#include "server/grpc/json_log_formatter.h"
#include "server/grpc/kv_event_publisher.h"
#include "server/grpc/lora_admin.h"
#include "server/grpc/model_registry.h"
#include "server/grpc/request_builder.h"
#include "server/grpc/server_credentials.h"
#include "server/grpc/server_options.h"
#include "server/grpc/serving_model.h"
#include "server/grpc/shutdown_signals.h"
#include "server/metrics/metrics_http_server.h"
#include "server/metrics/prometheus_text.h"

namespace tokenmill::server {
namespace {

constexpr const char* kServiceName = "tokenmill.v1.Inference";
// After draining: how long the last responses may take to reach slow clients.
constexpr auto kFinalWritesTimeout = std::chrono::seconds(5);

int Fail(const Status& status) {
  spdlog::error("{}", status.message());
  return 1;
}

// MemAvailable of /proc/meminfo: what a fractional --kv-cache-memory is a fraction of.
int64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// The machine's RAM: what the grammar cache's default budget is a fraction of.
int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? int64_t{pages} * page_size : 0;
}

std::string HostPort(const std::string& host, int port) {
  // IPv6 literals need brackets in a gRPC address.
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// "kv@<pod>@<model>", as llm-d's KV event subscriber reads the topic: the pod from
// POD_NAME (the Kubernetes downward API), else the host name.
std::string KvEventsTopic(const std::string& model_name) {
  std::string pod;
  if (const char* name = std::getenv("POD_NAME"); name != nullptr && *name != '\0') {
    pod = name;
  } else {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) pod = host;
  }
  return "kv@" + pod + "@" + model_name;
}

// GET /kv_events/state[?model=NAME]: every prefix the model (the default one without a name)
// has cached now, as a subscriber to its KV events should hold it; none while it is unloaded.
std::string RenderCachedPrefixes(ModelRegistry& models, std::string_view query,
                                 const std::vector<EngineConfig>& engine_configs) {
  const auto error = [](std::string_view message) {
    return nlohmann::json{{"error", message}}.dump();
  };
  std::string name;
  for (const auto& [key, value] : QueryPairs(query)) {
    if (key == "model") name = value;
  }
  const StatusOr<ModelRegistry::Resolved> resolved = models.Resolve(name);
  if (!resolved.ok()) return error(resolved.status().message());
  const ModelLease model = models.Peek(resolved->index);
  nlohmann::json blocks = nlohmann::json::array();
  if (model != nullptr) {
    StatusOr<std::vector<KvCacheEvent>> prefixes = model->engine->CachedPrefixes();
    if (!prefixes.ok()) return error(prefixes.status().message());
    for (const KvCacheEvent& prefix : *prefixes) {
      blocks.push_back({{"block_hash", prefix.hash},
                        {"parent_block_hash", prefix.parent_hash.has_value()
                                                  ? nlohmann::json(*prefix.parent_hash)
                                                  : nlohmann::json(nullptr)},
                        {"token_ids", prefix.tokens}});
    }
  }
  return nlohmann::json{{"block_size", engine_configs[resolved->index].block_size},
                        {"blocks", blocks}}
      .dump();
}

// POST /kv_cache/purge?tenant=NAME (or ?all=1): deletes the host and disk tiers' blocks of a
// tenant's prompts (every salt its requests had), or all of them.
MetricsHttpServer::ActionResult PurgeKvTier(const ServingModel* model, std::string_view query,
                                            bool shared_prefix_cache) {
  const auto error = [](int status, std::string message) {
    return MetricsHttpServer::ActionResult{status, nlohmann::json{{"error", message}}.dump()};
  };
  if (model == nullptr) return error(503, "the model is loading");
  std::optional<std::string> tenant;
  bool all = false;
  for (const auto& [key, value] : QueryPairs(query)) {
    if (key == "tenant") tenant = value;
    if (key == "all") all = value == "1" || value == "true";
  }
  if (all == tenant.has_value() || (tenant.has_value() && tenant->empty())) {
    return error(400, "say whose blocks to delete: ?tenant=NAME (a gateway tenant) or ?all=1");
  }
  if (tenant.has_value() && shared_prefix_cache) {
    return error(400, "with --shared-prefix-cache tenants share cached blocks, so one tenant's "
                      "cannot be told apart: purge ?all=1");
  }
  const StatusOr<int64_t> purged = model->engine->PurgeKvTier(
      all ? std::string() : PrefixCacheSalt(*tenant, "", /*shared_prefix_cache=*/false));
  if (!purged.ok()) return error(409, std::string(purged.status().message()));
  return {200, nlohmann::json{{"purged_blocks", *purged}}.dump()};
}

// With several models: whether each is loaded, and its loads and unloads.
std::string RenderModelStates(ModelRegistry& models) {
  std::vector<std::pair<std::string, double>> loaded, loads, unloads;
  for (const ModelState& state : models.States()) {
    loaded.emplace_back(state.name, state.loaded ? 1 : 0);
    loads.emplace_back(state.name, static_cast<double>(state.loads));
    unloads.emplace_back(state.name, static_cast<double>(state.unloads));
  }
  PrometheusWriter writer({});
  writer.GaugeByLabel("tokenmill:model_loaded", "1 while the model is loaded", "model_name",
                      loaded);
  writer.CounterByLabel("tokenmill:model_loads_total", "Loads of the model", "model_name", loads);
  writer.CounterByLabel("tokenmill:model_unloads_total",
                        "Unloads of the model (for room, or idle)", "model_name", unloads);
  return writer.text();
}

// Each model's options, engine settings and what the registry knows of it; the default first.
struct ModelPlan {
  // Several models on the CPU: one KV limit (--kv-cache-memory) their pools share; null when
  // each model has a pool of its own.
  std::shared_ptr<KvMemoryBudget> shared_kv;
  std::vector<ServerOptions> options;
  std::vector<EngineConfig> engine_configs;
  std::vector<RegisteredModel> registered;
  std::vector<std::shared_ptr<LoraTable>> loras;  // each model's adapters
};

// --lora-dir's admin routes: on the metrics port, behind the key, for a server of one model.
Status CheckLoraDir(const ServerOptions& options, size_t num_models) {
  if (options.lora_dir.empty()) return OkStatus();
  if (num_models > 1) {
    // An unloaded model's engine holds no adapter to add one to.
    return InvalidArgumentError("--lora-dir serves one model: drop it, or serve the other "
                                "models from another server");
  }
  if (options.api_key.empty() || options.metrics_port < 0) {
    return InvalidArgumentError("--lora-dir's routes are admin actions on the metrics port: "
                                "give --api-key (and a --metrics-port)");
  }
  return OkStatus();
}

StatusOr<ModelPlan> PlanModels(const ServerOptions& options, int64_t available_memory_bytes) {
  TM_ASSIGN_OR_RETURN(const std::vector<ModelSource> sources, ModelSourcesOf(options));
  TM_ASSIGN_OR_RETURN(const int64_t memory, ModelMemoryOf(options));
  if (sources.size() > 1 && !options.kv_cache_dir.empty()) {
    // A tenant's purge must reach every model's blocks, and an unloaded model's are nobody's.
    return InvalidArgumentError("--kv-cache-dir serves one model: drop it, or serve the other "
                                "models from another server");
  }
  TM_RETURN_IF_ERROR(CheckLoraDir(options, sources.size()));
  if (sources.size() > 1 && !options.kv_events_topic.empty()) {
    return InvalidArgumentError("--kv-events-topic is one topic, and each model publishes its "
                                "KV events on its own (kv@<pod>@<model>): drop it");
  }
  ModelPlan plan;
  for (size_t i = 0; i < sources.size(); ++i) {
    ServerOptions model_options = OptionsForModel(options, sources[i], i == 0);
    TM_ASSIGN_OR_RETURN(EngineConfig config,
                        MakeEngineConfig(model_options, available_memory_bytes));
    // The models' pools grow and shrink within one limit where pools can give memory back.
    if (sources.size() > 1 && config.device == Device::kCpu && config.num_kv_blocks == 0) {
      if (plan.shared_kv == nullptr) plan.shared_kv = KvMemoryBudget::Create(config.kv_cache_bytes);
      config.kv_memory_budget = plan.shared_kv;
    }
    const int64_t footprint = ModelFootprintBytes(model_options, config);
    const int64_t shared_kv = plan.shared_kv != nullptr ? plan.shared_kv->total_bytes() : 0;
    const std::string& id = sources[i].names.front();
    if (memory > 0 && footprint + shared_kv > memory) {
      return InvalidArgumentError(
          "model " + id + " needs " + FormatBytes(footprint + shared_kv) +
          (shared_kv > 0 ? " (its files, and the KV memory the models share)"
                         : " (its files and KV memory)") +
          " but --model-memory is " + FormatBytes(memory) +
          ": raise --model-memory or lower --kv-cache-memory");
    }
    TM_ASSIGN_OR_RETURN(std::shared_ptr<LoraTable> loras, LoraTableOf(model_options));
    plan.registered.push_back(
        {.names = sources[i].names, .adapters = loras, .footprint_bytes = footprint});
    plan.loras.push_back(std::move(loras));
    plan.options.push_back(std::move(model_options));
    plan.engine_configs.push_back(std::move(config));
  }
  return plan;
}

// GET /metrics: each model's families (its engine's while it is loaded, its requests' since
// the start), told apart by model_name; with several models, what the registry knows of each.
std::string RenderAllMetrics(ModelRegistry& models, const ModelPlan& plan,
                             const std::vector<std::unique_ptr<RequestMetrics>>& requests,
                             MetricsCompat compat) {
  std::vector<std::string> bodies;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ModelLease model = models.Peek(static_cast<int>(i));
    const std::vector<std::string> lora_names = plan.loras[i]->NamesById();
    // Only the default model takes adapters (--lora, --lora-dir).
    const ServedModelInfo info{
        .name = plan.registered[i].names.front(),
        .block_size = model != nullptr ? model->block_size : 0,
        .lora_names = lora_names,
        .max_loras = i == 0 ? static_cast<int>(plan.loras[i]->max_live()) : 0};
    bodies.push_back(model == nullptr
                         ? RenderMetrics(info, std::nullopt, *requests[i], compat)
                         : RenderMetrics(info, model->engine->Stats(), *requests[i], compat,
                                         model->grammars->stats()));
  }
  if (requests.size() > 1) bodies.push_back(RenderModelStates(models));
  return MergeFamilies(bodies);
}

void SetHealth(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  health->SetServingStatus(serving);
  health->SetServingStatus(kServiceName, serving);
}

int Run(const ServerOptions& options) {
  StatusOr<ModelPlan> plan = PlanModels(options, AvailableMemoryBytes());
  if (!plan.ok()) return Fail(plan.status());
  EngineConfig* engine_config = &plan->engine_configs.front();  // the default model's
  const StatusOr<int64_t> grammar_cache_bytes =
      GrammarCacheBudgetOf(options, PhysicalMemoryBytes());
  if (!grammar_cache_bytes.ok()) return Fail(grammar_cache_bytes.status());
  // Each model its share of the budget, and room for one grammar at least.
  const int64_t grammar_bytes_per_model =
      std::max(*grammar_cache_bytes / static_cast<int64_t>(plan->registered.size()),
               GrammarLimitsOf(options).max_table_bytes);

  ShutdownSignals signals;  // before any other thread starts (gRPC's credentials start some)
  // A disk tier write past RLIMIT_FSIZE fails with EFBIG (the tier pauses) instead of ending
  // the process.
  signal(SIGXFSZ, SIG_IGN);
  // Before the engines, which hand it each step's events, and destroyed after them.
  std::unique_ptr<KvEventPublisher> kv_events;
  if (!options.kv_events_endpoint.empty()) {
    std::vector<KvEventTopic> topics;
    for (size_t i = 0; i < plan->registered.size(); ++i) {
      topics.push_back({.name = options.kv_events_topic.empty()
                                    ? KvEventsTopic(plan->registered[i].names.front())
                                    : options.kv_events_topic,
                        .loras = plan->loras[i]});
    }
    StatusOr<std::unique_ptr<KvEventPublisher>> publisher = KvEventPublisher::Create(
        {.endpoint = options.kv_events_endpoint,
         .replay_endpoint = options.kv_events_replay_endpoint,
         .wildcard_host = options.kv_events_host,
         .block_size = engine_config->block_size,
         .buffer_batches = options.kv_events_buffer_steps,
         .topics = std::move(topics)});
    if (!publisher.ok()) return Fail(publisher.status());
    kv_events = std::move(*publisher);
    for (size_t i = 0; i < plan->engine_configs.size(); ++i) {
      plan->engine_configs[i].kv_event_handler = [publisher = kv_events.get(), i](
                                                     std::vector<KvCacheEvent> events) {
        publisher->Publish(i, std::move(events));
      };
    }
  }
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options);
  if (!credentials.ok()) return Fail(credentials.status());
  const bool tls = !options.tls_cert_path.empty();
  std::vector<std::unique_ptr<RequestMetrics>> request_metrics;  // one per model
  for (size_t i = 0; i < plan->registered.size(); ++i) {
    request_metrics.push_back(std::make_unique<RequestMetrics>());
  }
  const bool several_models = plan->registered.size() > 1;
  ModelRegistry models(
      plan->registered,
      {.memory_bytes = *ModelMemoryOf(options),
       .shared_kv_bytes = plan->shared_kv != nullptr ? plan->shared_kv->total_bytes() : 0,
       .idle_timeout = std::chrono::milliseconds(
           static_cast<int64_t>(options.model_idle_timeout_seconds * 1000.0)),
       .load_timeout = std::chrono::milliseconds(
           static_cast<int64_t>(options.model_load_timeout_seconds * 1000.0)),
       .max_waiting = static_cast<size_t>(options.max_queue)},
      [&plan, &request_metrics, grammar_bytes_per_model](
          int index) -> StatusOr<std::unique_ptr<ServingModel>> {
        TM_ASSIGN_OR_RETURN(std::unique_ptr<ServingModel> model,
                            LoadServingModel(plan->options[index], plan->engine_configs[index],
                                             grammar_bytes_per_model, plan->loras[index]));
        request_metrics[index]->SetMaxModelLen(model->engine->max_model_len());
        return model;
      });
  InferenceService service(request_metrics, models, options.api_key,
                           options.shared_prefix_cache);
  // The default model, while loaded, for what the metrics port shows of it.
  const auto default_model = [&models] { return models.Peek(0); };
  std::unique_ptr<LoraAdmin> lora_admin;
  if (!options.lora_dir.empty()) {
    StatusOr<std::unique_ptr<LoraAdmin>> admin = LoraAdmin::Create(
        options.lora_dir, plan->loras.front(), plan->registered.front().names,
        options.lora_weights == "q8_0" ? LoraWeights::kQ8_0 : LoraWeights::kF32,
        default_model);
    if (!admin.ok()) return Fail(admin.status());
    lora_admin = std::move(*admin);
  }
  // What the metrics port's /health says: from the model's load to the drain, as gRPC health.
  std::atomic<bool> serving{false};

  std::unique_ptr<MetricsHttpServer> metrics;
  const MetricsCompat compat =
      options.metrics_compat == "vllm" ? MetricsCompat::kVllm : MetricsCompat::kNone;
  const std::string& metrics_host =
      options.metrics_host.empty() ? options.host : options.metrics_host;
  if (options.metrics_port >= 0) {
    std::vector<MetricsHttpServer::Page> pages{
        {"/metrics", "text/plain; version=0.0.4; charset=utf-8",
         [&models, &plan, &request_metrics, compat](std::string_view) {
           return RenderAllMetrics(models, *plan, request_metrics, compat);
         },
         false,
         {},
         {}},
        {.path = "/health",
         .content_type = "text/plain; charset=utf-8",
         .render = [](std::string_view) { return std::string("ok\n"); },
         .needs_api_key = false,
         .available = [&serving] { return serving.load(std::memory_order_acquire); },
         .post = {}}};
    if (kv_events != nullptr) {
      // Every cached prompt's token ids: with --api-key, only for whoever holds the key.
      pages.push_back({.path = "/kv_events/state",
                       .content_type = "application/json",
                       .render =
                           [&models, &plan](std::string_view query) {
                             return RenderCachedPrefixes(models, query, plan->engine_configs);
                           },
                       .needs_api_key = true,
                       .available = {},
                       .post = {}});
    }
    if (!options.kv_cache_dir.empty()) {
      pages.push_back({.path = "/kv_cache/purge",
                       .content_type = "application/json",
                       .render = {},
                       .needs_api_key = true,
                       .available = {},
                       .post = [&default_model, shared = options.shared_prefix_cache](
                                   std::string_view query, std::string_view) {
                         return PurgeKvTier(default_model().get(), query, shared);
                       }});
    }
    if (lora_admin != nullptr) {
      for (const auto& [path, action] :
           {std::pair{"/v1/load_lora_adapter", &LoraAdmin::Load},
            std::pair{"/v1/unload_lora_adapter", &LoraAdmin::Unload}}) {
        pages.push_back({.path = path,
                         .content_type = "application/json",
                         .render = {},
                         .needs_api_key = true,
                         .available = {},
                         .post = [admin = lora_admin.get(), action](std::string_view,
                                                                    std::string_view body) {
                           return (admin->*action)(body);
                         }});
      }
    }
    StatusOr<std::unique_ptr<MetricsHttpServer>> started = MetricsHttpServer::Start(
        metrics_host, options.metrics_port, std::move(pages),
        {.api_key = options.api_key,
         .max_connections = static_cast<size_t>(options.metrics_max_connections),
         .request_timeout = std::chrono::milliseconds(
             static_cast<int64_t>(options.metrics_request_timeout_seconds * 1000.0))});
    if (!started.ok()) return Fail(started.status());
    metrics = std::move(*started);
    spdlog::info("metrics on http://{}/metrics", HostPort(metrics_host, metrics->port()));
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The port is ours, not gRPC's: gRPC 1.51's accept loop stops for good when the process
  // runs out of descriptors once; ours retries (server/grpc/grpc_listener.h). Bound without
  // SO_REUSEPORT, so a second server on a taken port fails instead of sharing its calls.
  StatusOr<std::unique_ptr<GrpcListener>> listener =
      GrpcListener::Bind(options.host, options.port);
  if (!listener.ok()) return Fail(listener.status());
  const int port = (*listener)->port();
  grpc::ServerBuilder builder;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
          *credentials);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return Fail(UnavailableError(
        "cannot serve gRPC on " + HostPort(options.host, port) +
        (tls ? ": --tls-key is not the key of --tls-cert?" : "")));
  }
  (*listener)->Start(std::move(acceptor));
  // The default health service starts out SERVING: say otherwise before the log line that
  // tells clients where to connect.
  SetHealth(*server, false);
  spdlog::info("listening on {} (gRPC){}{}; health NOT_SERVING while the model loads",
               HostPort(options.host, port),
               tls ? (options.tls_client_ca_path.empty() ? " over TLS" : " over mutual TLS") : "",
               options.api_key.empty() ? "" : ", API key required");

  if (const Status loaded = models.Start(); !loaded.ok()) {
    server->Shutdown();
    return Fail(loaded);
  }
  // Held for the startup's logs only: a held model never unloads.
  ModelLease first = models.Peek(0);
  service.Open();
  if (kv_events != nullptr) {
    std::vector<std::string> topics;
    for (const KvEventTopic& topic : kv_events->topics()) topics.push_back(topic.name);
    spdlog::info("KV cache events on {} ({} '{}'){}", kv_events->endpoint(),
                 topics.size() > 1 ? "topics" : "topic", fmt::join(topics, "', '"),
                 kv_events->replay_endpoint().empty()
                     ? ""
                     : ", replay on " + kv_events->replay_endpoint());
  }
  if (!signals.received()) {  // a signal during the load: straight to draining
    SetHealth(*server, true);
    serving.store(true, std::memory_order_release);
    spdlog::info("serving {} on {}", fmt::join(first->served_model_names, ", "),
                 HostPort(options.host, port));
    if (several_models) {
      const std::vector<std::string> ids = models.Ids();
      spdlog::info("and, loaded on first use: {}", fmt::join(ids.begin() + 1, ids.end(), ", "));
    }
  }
  first.reset();

  const std::string signal_name = signals.Wait();
  const auto drain_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(options.drain_timeout_seconds * 1000.0));
  SetHealth(*server, false);
  serving.store(false, std::memory_order_release);
  service.BeginDrain();
  spdlog::info("{}: draining {} open streams (up to {} s), health NOT_SERVING", signal_name,
               service.streams().open(), options.drain_timeout_seconds);
  // Lets in-flight requests finish, aborts those left at the deadline (their clients get
  // FINISH_REASON_ABORT) and stops the engine threads; requests waiting for a model's load
  // get UNAVAILABLE.
  models.Shutdown(drain_timeout);
  if (!service.streams().WaitUntilNoneOpen(std::chrono::steady_clock::now() +
                                           kFinalWritesTimeout)) {
    spdlog::warn("{} streams still writing; cancelling them", service.streams().open());
  }
  listener->reset();  // no new connections while the last calls end
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Wait();
  metrics.reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace tokenmill::server

int main(int argc, char** argv) {
  using namespace tokenmill;
  server::ServerOptions options;
  CLI::App app{"tokenmill-server: the tokenmill.v1.Inference gRPC API over one model or several"};
  server::AddServerOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  if (const Status s = SetupLogging(options.log_level); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  if (options.log_json) {
    spdlog::default_logger()->set_formatter(std::make_unique<server::JsonLogFormatter>());
  }
  return server::Run(options);
}
