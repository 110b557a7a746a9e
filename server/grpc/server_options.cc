#include "server/grpc/server_options.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <string>

#include "common/byte_size.h"
#include "common/env_name.h"
#include "engine/forward_backend.h"
#include "grammar/grammar_cache.h"

namespace tokenmill::server {

std::string EnvNameOfFlag(std::string_view flag) {
  return tokenmill::EnvNameOfFlag("TOKENMILL_", flag);
}

namespace {

template <typename T>
CLI::Option* AddOption(CLI::App& app, const std::string& flag, T& value, const std::string& help) {
  return app.add_option(flag, value, help)->envname(EnvNameOfFlag(flag))->capture_default_str();
}

CLI::Option* AddFlag(CLI::App& app, const std::string& flag, bool& value, const std::string& help) {
  return app.add_flag(flag, value, help)->envname(EnvNameOfFlag(flag));
}

}  // namespace

void AddServerOptions(CLI::App& app, ServerOptions& o) {
  AddOption(app, "--model", o.models,
            "GGUF model file, or NAME=PATH, given once per model: a request names one as its "
            "model (default: the file's name without .gguf). The first is the default model: "
            "it loads at startup and answers requests that name none; --served-model-name, "
            "--lora, --spec, --chat-template, the output parsers, --pooling and KV events "
            "are its alone. The others load on first use");
  // No variable: TOKENMILL_MODELS_DIR is where the tests, scripts and compose file look for
  // model files, which a server must not take as models to serve.
  app.add_option("--models-dir", o.models_dir,
                 "serve every .gguf file in this directory too, each named by its file name "
                 "without .gguf (loaded on first use); the one flag without a TOKENMILL_ "
                 "variable");
  AddOption(app, "--model-memory", o.model_memory,
            "what the models resident at once may hold (\"16GiB\": each model's file plus its "
            "KV pool and host tier; 0: no limit): a request for a model that does not fit "
            "waits while the least recently used models finish their requests and unload");
  AddOption(app, "--model-idle-timeout", o.model_idle_timeout_seconds,
            "seconds without a request after which a model unloads (0: only to make room)")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--model-load-timeout", o.model_load_timeout_seconds,
            "seconds a request waits for its model to load before UNAVAILABLE")
      ->check(CLI::Range(0.001, 86400.0));
  AddOption(app, "--served-model-name", o.served_model_names,
            "the names clients call the default model by, one or more (--served-model-name a "
            "b, or a,b as in the variable); the first is its id in /v1/models and the metrics' "
            "model_name (default: NAME of --model NAME=PATH, else the file's name without "
            ".gguf)")
      ->delimiter(',');
  AddOption(app, "--chat-template", o.chat_template_path,
            "Jinja chat template file (default: the model's own)")
      ->check(CLI::ExistingFile);
  AddOption(app, "--tool-call-parser", o.tool_call_parser,
            "how chat output's tool calls are parsed (and forced calls written): auto (from "
            "the chat template: <tool_call> hermes, [TOOL_CALLS] mistral, with [ARGS] "
            "mistral_v11, <|python_tag|> llama3_json, <|channel|> harmony, "
            "DeepSeek's tool-calls marker deepseek_v3 (with ```json) or deepseek_v31, "
            "<|tool_calls_section_begin|> kimi_k2, else json), hermes, llama3_json, mistral, "
            "mistral_v11, json, harmony (gpt-oss), deepseek_v3 (V3, R1), deepseek_v31, kimi_k2 "
            "or none")
      ->check(CLI::IsMember({"auto", "hermes", "llama3_json", "mistral", "mistral_v11", "json",
                             "harmony", "deepseek_v3", "deepseek_v31", "kimi_k2", "none"}));
  AddOption(app, "--reasoning-parser", o.reasoning_parser,
            "how chat output's reasoning is split off: auto (think when the chat template uses "
            "<think>, harmony when it writes <|channel|>), think (<think>...</think>), harmony "
            "(gpt-oss's analysis channel) or none")
      ->check(CLI::IsMember({"auto", "think", "harmony", "none"}));
  AddOption(app, "--pooling", o.pooling,
            "how Embed (/v1/embeddings) pools a prompt's final hidden states: auto (the GGUF's "
            "pooling_type; none when it states none, as chat models do), mean, cls, last, or "
            "none (no embeddings)")
      ->check(CLI::IsMember({"auto", "mean", "cls", "last", "none"}));
  AddFlag(app, "--parse-special-in-content", o.parse_special_in_content,
          "tokenize special-token text in chat messages, tools and names (\"<|im_start|>\") as "
          "control tokens, as vLLM, SGLang and llama-server do: a client can then write turns "
          "of other roles. Default: only the chat template's own markup is parsed");
  AddOption(app, "--host", o.host, "address to listen on");
  AddOption(app, "--port", o.port, "gRPC port (0: any free port)")->check(CLI::Range(0, 65535));
  AddOption(app, "--metrics-port", o.metrics_port,
            "Prometheus /metrics port (0: any free port, -1: none)")
      ->check(CLI::Range(-1, 65535));
  AddOption(app, "--metrics-host", o.metrics_host,
            "address of the metrics endpoint (default: --host), e.g. the pod's address while "
            "gRPC stays on loopback");
  AddOption(app, "--metrics-compat", o.metrics_compat,
            "none, or vllm: /metrics also serves vLLM's names (vllm:num_requests_waiting, "
            "vllm:kv_cache_usage_perc, ...), which inference gateways' endpoint pickers read")
      ->check(CLI::IsMember({"none", "vllm"}));
  AddOption(app, "--metrics-max-connections", o.metrics_max_connections,
            "connections open at once on the metrics port; more are closed as they arrive "
            "(idle clients cannot use up the descriptors gRPC needs)")
      ->check(CLI::Range(1, 100000));
  AddOption(app, "--metrics-request-timeout", o.metrics_request_timeout_seconds,
            "seconds a metrics connection has to send its request and read the answer")
      ->check(CLI::Range(0.001, 3600.0));
  AddOption(app, "--threads", o.threads, "CPU threads of the forward pass (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  AddOption(app, "--cublas-min-tokens", o.cublas_min_tokens,
            "cuda: steps of at least this many tokens multiply with cuBLAS over f16 weights "
            "(faster prefill; greedy tokens may then depend on the batch); 0: never")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--kv-cache-memory", o.kv_cache_memory,
            "KV cache size (\"2GiB\") or fraction of available memory (\"0.5\"); with several "
            "models on the CPU, one limit their pools share");
  AddOption(app, "--kv-cache-dtype", o.kv_cache_dtype,
            "KV cache element type: f16, int8 (a scale per token and KV head: about twice "
            "the tokens), q4_0 (llama.cpp's 4-bit blocks of 32: 3.56x the tokens), int4 "
            "(4-bit with a scale and zero per 32 values: 3.2x, closer to f16 than q4_0) or "
            "fp8 (E4M3 in int8's layout; needs --device cuda)")
      ->check(CLI::IsMember({"f16", "int8", "q4_0", "int4", "fp8"}));
  AddOption(app, "--kv-cache-dtype-v", o.kv_cache_dtype_v,
            "V's element type when it should differ from --kv-cache-dtype's, which is then K's "
            "alone (llama.cpp's -ctk/-ctv: keys are the sensitive half, e.g. int8 keys with "
            "q4_0 values); f16, int8, q4_0 or int4; the CPU only")
      ->check(CLI::IsMember({"f16", "int8", "q4_0", "int4"}));
  AddOption(app, "--block-size", o.block_size, "tokens per KV block")
      ->check(CLI::Range(1, 1024));
  AddOption(app, "--max-num-seqs", o.max_num_seqs, "requests running at once")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--max-num-batched-tokens", o.max_num_batched_tokens, "tokens per engine step")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--max-prefills-per-step", o.max_prefills_per_step,
            "waiting requests that begin computing their prompts in one step, 0 for no limit "
            "(default: 1 on the CPU, where a step's time grows with its tokens, so each prompt of "
            "a burst answers after its own rather than after all of them; no limit with "
            "--device cuda; docs/benchmarks.md)")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--max-queue", o.max_queue,
            "waiting requests beyond which Generate answers RESOURCE_EXHAUSTED")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--max-model-len", o.max_model_len,
            "prompt plus generated tokens per request (0: the model's context)")
      ->check(CLI::NonNegativeNumber);
  AddFlag(app, "--no-prefix-cache", o.no_prefix_cache, "do not share cached prompt prefixes");
  AddFlag(app, "--shared-prefix-cache", o.shared_prefix_cache,
          "share cached prompt prefixes across tenants (x-tokenmill-tenant), keyed by the "
          "client's cache_salt alone; by default each tenant's are its own. A side channel: a "
          "tenant then learns from cached_tokens and latency whether another tenant sent a "
          "prompt (a guessed secret that hits the cache is confirmed), so use it only when "
          "tenants trust each other");
  AddFlag(app, "--no-sliding-window-kv", o.no_sliding_window_kv,
          "sliding-window layers (Gemma 2 and 3) keep every KV block in the full layers' pool "
          "instead of a pool of their own that frees blocks past their window (vLLM's "
          "--disable-hybrid-kv-cache-manager)");
  AddOption(app, "--kv-cache-host-size", o.kv_cache_host_size,
            "host memory for a tier below the KV pool (\"8GiB\"; 0: none): full prefix blocks "
            "are copied through as they are cached (on CUDA into page-locked memory, queued with "
            "the steps) and a later request whose prompt continues there takes them back at "
            "once; least recently used go first. Worth it on CUDA, where the pool is device "
            "memory; see docs/kv-tiers.md");
  AddOption(app, "--kv-cache-dir", o.kv_cache_dir,
            "a directory for a disk tier below the KV pool: full prefix blocks are written "
            "through as they are cached and a later request, or this server restarted with the "
            "same model and KV settings, loads them instead of computing them. Holds prompt "
            "data (files 0600); see docs/kv-tiers.md");
  AddOption(app, "--kv-cache-dir-size", o.kv_cache_dir_size,
            "the disk tier's byte budget (\"20GiB\"); least recently used blocks go first");
  AddOption(app, "--kv-cache-dir-ttl", o.kv_cache_dir_ttl_seconds,
            "seconds after which a disk tier block nobody used is deleted (0: kept until the "
            "budget needs its room)")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--spec", o.spec,
            "speculative decoding: none, ngram (prompt lookup) or draft (--draft-model)")
      ->check(CLI::IsMember({"none", "ngram", "draft"}));
  AddOption(app, "--spec-tokens", o.spec_tokens,
            "most draft tokens per request and step (adapts to acceptance)")
      ->check(CLI::Range(1, 16));
  AddOption(app, "--lora", o.lora_adapters,
            "a LoRA adapter of the model in llama.cpp's GGUF form, NAME=PATH, the option given "
            "once per adapter: a request whose model is NAME runs with it")
      ->take_all();
  AddOption(app, "--lora-weights", o.lora_weights,
            "how the LoRA adapters' pairs are kept: f32 (their values, as llama.cpp "
            "multiplies them; B in f16 where the file has it so) or q8_0 (A in llama.cpp's "
            "8-bit blocks: a quarter of the memory traffic, on the int8 kernels of the base "
            "matrices, A·x rounded to 8 bits; B in f16)")
      ->check(CLI::IsMember({"f32", "q8_0"}));
  AddOption(app, "--lora-dir", o.lora_dir,
            "lets the admin load and unload LoRA adapters at run time (POST "
            "/v1/load_lora_adapter and /v1/unload_lora_adapter on the metrics port, with "
            "--api-key), from files inside this directory only; one model per server");
  AddOption(app, "--max-loras", o.max_loras,
            "LoRA adapters loaded at once, --lora's and the admin's together")
      ->check(CLI::Range(1, 1024));
  AddOption(app, "--draft-model", o.draft_model_path,
            "GGUF draft model for --spec draft (same vocabulary as --model)")
      ->check(CLI::ExistingFile);
  AddOption(app, "--tls-cert", o.tls_cert_path,
            "PEM certificate chain: the gRPC port speaks TLS (with --tls-key)")
      ->check(CLI::ExistingFile);
  AddOption(app, "--tls-key", o.tls_key_path, "PEM private key of --tls-cert")
      ->check(CLI::ExistingFile);
  AddOption(app, "--tls-client-ca", o.tls_client_ca_path,
            "PEM CA certificates: clients must present a certificate one of them signed (mTLS)")
      ->check(CLI::ExistingFile);
  // No capture_default_str: the key must never show in --help.
  app.add_option("--api-key", o.api_key,
                 "tokenmill.v1.Inference calls must send the metadata 'authorization: Bearer "
                 "<key>' (empty: no key; prefer the variable, command lines are visible)")
      ->envname(EnvNameOfFlag("--api-key"));
  AddOption(app, "--kv-events-endpoint", o.kv_events_endpoint,
            "publish KV cache events (vLLM's format, ZeroMQ PUB) here, e.g. tcp://*:5557 "
            "(bound on --kv-events-host; empty: none)");
  AddOption(app, "--kv-events-replay-endpoint", o.kv_events_replay_endpoint,
            "serve replays of recent KV event batches here (ZeroMQ ROUTER), e.g. tcp://*:5558 "
            "(bound on --kv-events-host)");
  AddOption(app, "--kv-events-host", o.kv_events_host,
            "the interface a wildcard KV event or replay endpoint (tcp://*:PORT) binds. The "
            "events carry every cached prompt's token ids: whoever reaches these ports reads "
            "them, so loopback unless you name another (0.0.0.0: every interface)");
  AddOption(app, "--kv-events-topic", o.kv_events_topic,
            "the KV events' topic (empty: kv@<POD_NAME or host name>@<model>, as llm-d reads)");
  AddOption(app, "--kv-events-buffer-steps", o.kv_events_buffer_steps,
            "KV event batches (one per engine step) kept for replay")
      ->check(CLI::Range(1, 10000000));
  grammar::GrammarLimits& limits = o.grammar_limits;
  AddOption(app, "--grammar-max-repetition", limits.max_repetition,
            "structured output: the largest repetition bound a request may use (JSON Schema "
            "maxLength, minLength, maxItems, minItems; regex and GBNF {m,n})")
      ->check(CLI::Range(int64_t{1}, int64_t{std::numeric_limits<int32_t>::max()}));
  AddOption(app, "--grammar-max-rules", limits.max_rules,
            "structured output: rules of a compiled grammar")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--grammar-max-elements", limits.max_elements,
            "structured output: elements (literal bytes, classes, references) of a compiled "
            "grammar")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--grammar-max-schema-depth", limits.max_schema_depth,
            "structured output: nesting of JSON Schema subschemas and $ref chains")
      ->check(CLI::Range(1, 10000));
  AddOption(app, "--grammar-max-table-mib", o.grammar_max_table_mib,
            "structured output: MiB of one compiled grammar's token tables")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--grammar-cache-mib", o.grammar_cache_mib,
            "structured output: MiB the cache of compiled grammars may hold (least recently "
            "used dropped past it); 0: a sixteenth of physical memory, at least "
            "--grammar-max-table-mib, at most 4096")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--grammar-max-compile-ms", o.grammar_max_compile_ms,
            "structured output: milliseconds one grammar may take to compile (off the engine "
            "thread)")
      ->check(CLI::PositiveNumber);
  AddOption(app, "--drain-timeout", o.drain_timeout_seconds,
            "seconds SIGTERM/SIGINT lets in-flight requests finish before aborting them")
      ->check(CLI::NonNegativeNumber);
  AddOption(app, "--log-level", o.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  AddFlag(app, "--log-json", o.log_json, "one JSON object per log line");
}

grammar::GrammarLimits GrammarLimitsOf(const ServerOptions& o) {
  grammar::GrammarLimits limits = o.grammar_limits;
  limits.max_table_bytes = o.grammar_max_table_mib << 20;
  limits.max_compile_time = std::chrono::milliseconds(o.grammar_max_compile_ms);
  return limits;
}

StatusOr<int64_t> GrammarCacheBudgetOf(const ServerOptions& o, int64_t physical_memory_bytes) {
  const int64_t max_grammar_bytes = GrammarLimitsOf(o).max_table_bytes;
  if (o.grammar_cache_mib == 0) {
    return grammar::DefaultGrammarCacheBudget(physical_memory_bytes, max_grammar_bytes);
  }
  if (o.grammar_cache_mib < o.grammar_max_table_mib) {
    return InvalidArgumentError("--grammar-cache-mib " + std::to_string(o.grammar_cache_mib) +
                                " cannot hold one grammar of --grammar-max-table-mib " +
                                std::to_string(o.grammar_max_table_mib) +
                                ": raise the first or lower the second");
  }
  return o.grammar_cache_mib << 20;
}

std::vector<std::string> LoraNames(const ServerOptions& options) {
  std::vector<std::string> names;
  for (const std::string& flag : options.lora_adapters) names.push_back(flag.substr(0, flag.find('=')));
  return names;
}

namespace {

std::string FileStem(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name;
}

Status CheckModelName(const std::string& name, std::string_view flag) {
  const bool printable = std::all_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) > ' ' && c != 0x7f;
  });
  if (name.empty() || !printable) {
    return InvalidArgumentError(std::string(flag) + " '" + name +
                                "': a name needs at least one character and no spaces or "
                                "control characters");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<std::string>> ServedModelNamesOf(const ServerOptions& options) {
  if (options.served_model_names.empty()) {
    return std::vector<std::string>{FileStem(options.model_path)};
  }
  std::set<std::string_view> seen;
  for (const std::string& name : options.served_model_names) {
    if (Status valid = CheckModelName(name, "--served-model-name"); !valid.ok()) {
      return InvalidArgumentError(valid.message() +
                                  " (several names: --served-model-name a b)");
    }
    if (!seen.insert(name).second) {
      return InvalidArgumentError("--served-model-name '" + name + "' is given twice");
    }
  }
  return options.served_model_names;
}

StatusOr<std::vector<ModelSource>> ModelSourcesOf(const ServerOptions& options) {
  std::vector<ModelSource> sources;
  for (const std::string& flag : options.models) {
    // NAME=PATH: an '=' before any '/' (a path may hold '=' further on).
    const size_t equals = flag.find('=');
    const bool named = equals != std::string::npos && flag.find('/') > equals;
    ModelSource source{.path = named ? flag.substr(equals + 1) : flag, .names = {}};
    if (source.path.empty()) return InvalidArgumentError("--model " + flag + ": give NAME=PATH");
    source.names = {named ? flag.substr(0, equals) : FileStem(source.path)};
    if (sources.empty() && !options.served_model_names.empty()) {
      ServerOptions first = options;
      first.model_path = source.path;
      TM_ASSIGN_OR_RETURN(source.names, ServedModelNamesOf(first));
    }
    sources.push_back(std::move(source));
  }
  if (!options.models_dir.empty()) {
    std::error_code error;
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(options.models_dir, error)) {
      std::error_code ignored;
      if (entry.path().extension() == ".gguf" && entry.is_regular_file(ignored)) {
        files.push_back(entry.path().string());
      }
    }
    if (error) {
      return InvalidArgumentError("--models-dir " + options.models_dir + ": " + error.message());
    }
    std::ranges::sort(files);
    for (std::string& file : files) {
      sources.push_back({.path = file, .names = {FileStem(file)}});
    }
  }
  if (sources.empty()) {
    return InvalidArgumentError(options.models_dir.empty()
                                    ? "give a model: --model PATH (or NAME=PATH, once per model) "
                                      "or --models-dir DIR"
                                    : "--models-dir " + options.models_dir +
                                          " holds no .gguf file: add one, or give --model PATH");
  }
  std::set<std::string> seen;
  const std::vector<std::string> adapters = LoraNames(options);
  for (const ModelSource& source : sources) {
    for (const std::string& name : source.names) {
      TM_RETURN_IF_ERROR(CheckModelName(name, "model name"));
      if (!seen.insert(name).second) {
        return InvalidArgumentError("two models are called '" + name + "' (--model " +
                                    source.path + "): name one --model NAME=PATH");
      }
    }
  }
  for (const std::string& name : adapters) {
    if (seen.contains(name)) {
      return InvalidArgumentError("--lora " + name + ": a model is called that too");
    }
  }
  return sources;
}

ServerOptions OptionsForModel(const ServerOptions& options, const ModelSource& source,
                              bool is_default) {
  ServerOptions model = options;
  model.model_path = source.path;
  model.served_model_names = source.names;
  if (!is_default) {
    const ServerOptions defaults;
    model.lora_adapters.clear();
    model.spec = defaults.spec;
    model.draft_model_path.clear();
    model.chat_template_path.clear();
    model.tool_call_parser = defaults.tool_call_parser;
    model.reasoning_parser = defaults.reasoning_parser;
    model.pooling = defaults.pooling;
  }
  return model;
}

int64_t ModelFootprintBytes(const ServerOptions& model_options,
                            const EngineConfig& engine_config) {
  std::vector<std::string> files{model_options.model_path};
  if (!model_options.draft_model_path.empty()) files.push_back(model_options.draft_model_path);
  for (const std::string& flag : model_options.lora_adapters) {
    if (const size_t equals = flag.find('='); equals != std::string::npos) {
      files.push_back(flag.substr(equals + 1));
    }
  }
  // A KV limit shared by several models is counted once, not by each (ModelLimits).
  int64_t bytes = (engine_config.kv_memory_budget != nullptr ? 0 : engine_config.kv_cache_bytes) +
                  engine_config.kv_tiers.host_bytes;
  for (const std::string& file : files) {
    // A file that cannot be read counts nothing: its load fails, naming it and its flag.
    std::error_code error;
    const uintmax_t size = std::filesystem::file_size(file, error);
    if (!error) bytes += static_cast<int64_t>(size);
  }
  return bytes;
}

StatusOr<int64_t> ModelMemoryOf(const ServerOptions& options) {
  if (options.model_memory == "0") return 0;
  const StatusOr<int64_t> bytes = ParseByteSize(options.model_memory);
  if (!bytes.ok() || *bytes <= 0) {
    return InvalidArgumentError("--model-memory: " +
                                (bytes.ok() ? std::string("give a positive size, or 0")
                                            : std::string(bytes.status().message())) +
                                " (e.g. \"16GiB\")");
  }
  return *bytes;
}

StatusOr<EngineConfig> MakeEngineConfig(const ServerOptions& o, int64_t available_memory_bytes) {
  const Device device = o.device == "cuda" ? Device::kCuda : Device::kCpu;
  if (Status available = CheckDeviceAvailable(device); !available.ok()) {
    return InvalidArgumentError(available.message());
  }
  StatusOr<MemoryBudget> budget = ParseMemoryBudget(o.kv_cache_memory);
  if (!budget.ok()) {
    return InvalidArgumentError("--kv-cache-memory: " + budget.status().message());
  }
  StatusOr<KvType> kv_type = ParseKvType(o.kv_cache_dtype);
  if (!kv_type.ok()) return InvalidArgumentError("--kv-cache-dtype: " + kv_type.status().message());
  TM_RETURN_IF_ERROR(CheckKvTypeOnDevice(*kv_type, device == Device::kCuda, "--kv-cache-dtype"));
  EngineConfig config;
  config.device = device;
  config.cuda_cublas_min_tokens = o.cublas_min_tokens;
  config.kv_type = *kv_type;
  if (!o.kv_cache_dtype_v.empty()) {
    StatusOr<KvType> v_type = ParseKvType(o.kv_cache_dtype_v);
    if (!v_type.ok()) {
      return InvalidArgumentError("--kv-cache-dtype-v: " + v_type.status().message());
    }
    if (*v_type != *kv_type && device == Device::kCuda) {
      return InvalidArgumentError(
          "--kv-cache-dtype-v: the CUDA backend keeps K and V in one type; drop "
          "--kv-cache-dtype-v, or run on the CPU (--device cpu)");
    }
    config.kv_type_v = *v_type;
  }
  if (device == Device::kCuda && budget->is_fraction()) {
    config.kv_cache_fraction = budget->fraction();  // of the GPU's memory, once weights are in
    config.kv_cache_bytes = 0;
  } else {
    config.kv_cache_bytes = budget->Resolve(available_memory_bytes);
  }
  config.block_size = o.block_size;
  config.enable_prefix_caching = !o.no_prefix_cache;
  config.sliding_window_kv_group = !o.no_sliding_window_kv;
  if (!o.kv_events_endpoint.empty() && o.no_prefix_cache) {
    return InvalidArgumentError(
        "--kv-events-endpoint publishes the prefix cache's events: drop --no-prefix-cache");
  }
  if (o.kv_events_endpoint.empty() && !o.kv_events_replay_endpoint.empty()) {
    return InvalidArgumentError("--kv-events-replay-endpoint needs --kv-events-endpoint");
  }
  {
    const StatusOr<int64_t> host_bytes =
        o.kv_cache_host_size == "0" ? StatusOr<int64_t>(0) : ParseByteSize(o.kv_cache_host_size);
    if (!host_bytes.ok() || *host_bytes < 0) {
      return InvalidArgumentError("--kv-cache-host-size: " +
                                  (host_bytes.ok() ? std::string("give a size, or 0 for none")
                                                   : std::string(host_bytes.status().message())) +
                                  " (e.g. \"8GiB\")");
    }
    if (*host_bytes > 0 && o.no_prefix_cache) {
      return InvalidArgumentError(
          "--kv-cache-host-size keeps prefix blocks in host memory, which needs the prefix "
          "cache: drop --no-prefix-cache or --kv-cache-host-size");
    }
    config.kv_tiers.host_bytes = *host_bytes;
  }
  if (!o.kv_cache_dir.empty()) {
    if (o.no_prefix_cache) {
      return InvalidArgumentError(
          "--kv-cache-dir keeps prefix blocks on disk, which needs the prefix cache: drop "
          "--no-prefix-cache or --kv-cache-dir");
    }
    StatusOr<int64_t> dir_bytes = ParseByteSize(o.kv_cache_dir_size);
    if (!dir_bytes.ok() || *dir_bytes <= 0) {
      return InvalidArgumentError("--kv-cache-dir-size: " +
                                  (dir_bytes.ok() ? std::string("give a positive size")
                                                  : std::string(dir_bytes.status().message())) +
                                  " (e.g. \"20GiB\")");
    }
    config.kv_tiers = {.host_bytes = config.kv_tiers.host_bytes,
                       .dir = o.kv_cache_dir,
                       .max_bytes = *dir_bytes,
                       .ttl = std::chrono::seconds(
                           static_cast<int64_t>(std::ceil(o.kv_cache_dir_ttl_seconds))),
                       .model_path = o.model_path};
  }
  config.num_threads = o.threads;
  config.scheduler.max_num_seqs = o.max_num_seqs;
  config.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  config.scheduler.max_prefills_per_step =
      o.max_prefills_per_step.value_or(device == Device::kCuda ? 0 : 1);
  config.scheduler.max_queue = o.max_queue;
  // The engine caps the limit at the model's context: 0 asks for exactly that.
  config.scheduler.max_model_len =
      o.max_model_len > 0 ? o.max_model_len : std::numeric_limits<int>::max();
  config.spec.method = ParseSpecMethod(o.spec).value_or(SpecMethod::kNone);
  config.spec.num_speculative_tokens = o.spec_tokens;
  if (config.spec.method == SpecMethod::kDraft && o.draft_model_path.empty()) {
    return InvalidArgumentError("--spec draft needs --draft-model PATH (a GGUF model with the "
                                "same vocabulary as --model)");
  }
  if (config.spec.method != SpecMethod::kDraft && !o.draft_model_path.empty()) {
    return InvalidArgumentError("--draft-model is only used with --spec draft (--spec is " +
                                o.spec + ")");
  }
  if (!ParseSpecMethod(o.spec)) {
    return InvalidArgumentError("--spec " + o.spec + ": use none, ngram or draft");
  }
  return config;  // Engine::Create validates the rest, once the model is known
}

}  // namespace tokenmill::server
