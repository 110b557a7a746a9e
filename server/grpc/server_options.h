// tokenmill-server's flags. Each is also settable by an environment variable
// TOKENMILL_<NAME> (--max-queue: TOKENMILL_MAX_QUEUE), but for --models-dir; a flag on the
// command line wins.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine_config.h"
#include "grammar/compiler.h"

namespace tokenmill::server {

struct ServerOptions {
  // --model [NAME=]PATH, once per model; the first is the default model.
  std::vector<std::string> models;
  std::string models_dir;  // every *.gguf file in it is served too, named by its base name
  // Model files plus KV pools resident at once ("8GiB"); 0: no limit.
  std::string model_memory = "0";
  double model_idle_timeout_seconds = 0;  // unload a model idle this long; 0: never
  double model_load_timeout_seconds = 120;  // a request's wait for its model to load
  // The model one ServingModel loads (OptionsForModel).
  std::string model_path;
  // The names clients call the default model by (the first is its id in the API and in
  // metrics); empty: the model file's base name without .gguf (ServedModelNamesOf).
  std::vector<std::string> served_model_names;
  std::string chat_template_path;  // empty: the model's own template
  // How chat output is parsed: auto (from the chat template), none, or a format / parser.
  std::string tool_call_parser = "auto";  // hermes, llama3_json, mistral(_v11), json, harmony
  std::string reasoning_parser = "auto";  // think (<think>...</think>), harmony
  // How Embed pools a prompt's hidden states: auto (the GGUF's pooling_type), mean, cls, last
  // or none.
  std::string pooling = "auto";
  // Special-token text in what chat clients send becomes control tokens, as vLLM, SGLang and
  // llama-server do; off (the default), only the chat template's markup does.
  bool parse_special_in_content = false;
  std::string host = "127.0.0.1";
  int port = 50051;          // 0: any free port (logged)
  int metrics_port = 8002;   // 0: any free port (logged); -1: no metrics endpoint
  std::string metrics_host;  // empty: --host
  std::string metrics_compat = "none";  // vllm: also vLLM's names, for inference gateways
  int metrics_max_connections = 64;      // open at once on the metrics port
  double metrics_request_timeout_seconds = 10.0;  // to read a request and write its answer
  int threads = 0;           // 0: all cores
  std::string device = "cpu";
  int cublas_min_tokens = 0;  // --device cuda: steps of >= this many tokens use cuBLAS; 0 never
  std::string kv_cache_memory = "256MiB";  // a size, or a fraction of free memory
  std::string kv_cache_dtype = "f16";      // f16, int8 (CPU and CUDA) or fp8 (CUDA only)
  std::string kv_cache_dtype_v;            // V's, when not kv_cache_dtype's (the CPU only)
  int block_size = 16;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  // 0: no limit; unset: 1 on the CPU (a step's time grows with its tokens), none on CUDA.
  std::optional<int> max_prefills_per_step;
  int max_queue = 1024;
  int max_model_len = 0;  // 0: the model's context length
  bool no_prefix_cache = false;
  // Tenants share cached prompt prefixes (the client's cache_salt alone keeps them apart);
  // by default each tenant's are its own (server/grpc/request_builder.h, PrefixCacheSalt).
  bool shared_prefix_cache = false;
  bool no_sliding_window_kv = false;  // sliding-window layers keep every block, as full ones
  std::string kv_cache_host_size = "0";  // the host tier's bytes; 0: none
  std::string kv_cache_dir;              // the disk tier's directory; empty: none
  std::string kv_cache_dir_size = "10GiB";  // its byte budget
  double kv_cache_dir_ttl_seconds = 0;   // files unused this long are deleted; 0: never
  std::string spec = "none";  // speculative decoding: none, ngram or draft
  int spec_tokens = 4;        // most draft tokens per request and step
  std::string draft_model_path;  // --spec draft: a GGUF with the model's vocabulary
  // LoRA adapters of the model, NAME=PATH each (--lora): a request names one as its model.
  std::vector<std::string> lora_adapters;
  // How the adapters' A matrices are kept: f32 (as the files hold them) or q8_0 (a quarter of
  // the bytes, on the int8 kernels).
  std::string lora_weights = "f32";
  // Where POST /v1/load_lora_adapter may load adapters from (empty: not at run time), and
  // how many adapters may be loaded at once, --lora's included.
  std::string lora_dir;
  int max_loras = 16;
  // TLS on the gRPC port: a PEM certificate chain and its key; with a client CA, clients must
  // present a certificate it signed (mTLS). All empty: plaintext.
  std::string tls_cert_path;
  std::string tls_key_path;
  std::string tls_client_ca_path;
  std::string api_key;  // tokenmill.v1.Inference asks for "authorization: Bearer <key>"
  // KV cache events for KV-aware routers (vLLM's format over ZeroMQ): the PUB endpoint (empty:
  // none), the replay endpoint, the topic (empty: "kv@<POD_NAME or host name>@<model>") and
  // the batches kept for replay.
  std::string kv_events_endpoint;
  std::string kv_events_replay_endpoint;
  std::string kv_events_host = "127.0.0.1";  // what a wildcard (tcp://*:PORT) endpoint binds
  std::string kv_events_topic;
  int kv_events_buffer_steps = 10000;
  // Caps on a request's grammar, JSON Schema or regex (over one: INVALID_ARGUMENT naming what
  // the request sent and the flag); table memory in MiB and compile time in ms.
  grammar::GrammarLimits grammar_limits;
  int64_t grammar_max_table_mib = grammar::GrammarLimits{}.max_table_bytes >> 20;
  int64_t grammar_max_compile_ms = grammar::GrammarLimits{}.max_compile_time.count();
  // What the cache of compiled grammars may hold, in MiB; 0: a sixteenth of physical memory
  // (at least one grammar at --grammar-max-table-mib, at most 4 GiB).
  int64_t grammar_cache_mib = 0;
  double drain_timeout_seconds = 30.0;
  std::string log_level = "info";
  bool log_json = false;
};

// Registers every flag on `app`, bound to `options`, with its TOKENMILL_<NAME> variable.
void AddServerOptions(CLI::App& app, ServerOptions& options);

// The grammar caps the --grammar-max-* flags set.
grammar::GrammarLimits GrammarLimitsOf(const ServerOptions& options);

// The compiled-grammar cache's budget in bytes: --grammar-cache-mib, or with 0 the default for
// a machine of `physical_memory_bytes`. InvalidArgument when it cannot hold one grammar at
// --grammar-max-table-mib.
StatusOr<int64_t> GrammarCacheBudgetOf(const ServerOptions& options,
                                       int64_t physical_memory_bytes);

// The environment variable of a flag: "--max-queue" -> "TOKENMILL_MAX_QUEUE".
std::string EnvNameOfFlag(std::string_view flag);

// The adapters' names of --lora NAME=PATH, in flag order (those without '=' as they are:
// loading refuses them).
std::vector<std::string> LoraNames(const ServerOptions& options);

// The names the model is served under: --served-model-name, or the model file's base name
// without ".gguf" ("models/SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1").
// InvalidArgument naming the flag for an empty name, one with spaces or control characters, or
// a name given twice.
StatusOr<std::vector<std::string>> ServedModelNamesOf(const ServerOptions& options);

// One model the server serves: a --model flag or a file of --models-dir.
struct ModelSource {
  std::string path;
  std::vector<std::string> names;  // the first is its id
};

// The models of --model and --models-dir (by file name), the default model (the first --model,
// else the dir's first file) first. InvalidArgument naming the flag: no model, an invalid
// name, a name given twice (models' and LoRA adapters' together), a missing directory.
StatusOr<std::vector<ModelSource>> ModelSourcesOf(const ServerOptions& options);

// The options model `source` loads with: its path and names. Flags about the default model
// alone (--lora, --spec, --draft-model, --chat-template, the output parsers, --pooling) are
// dropped for the others.
ServerOptions OptionsForModel(const ServerOptions& options, const ModelSource& source,
                              bool is_default);

// What --model-memory counts for a model: its files (model, draft, adapters) and its KV
// memory (host tier, and pool unless it shares a limit with other models: counted once by the
// registry); a file that cannot be read counts nothing (its load says why).
int64_t ModelFootprintBytes(const ServerOptions& model_options,
                            const EngineConfig& engine_config);

// --model-memory in bytes (0: no limit).
StatusOr<int64_t> ModelMemoryOf(const ServerOptions& options);

// The engine settings the flags ask for. `available_memory_bytes` resolves a fractional
// --kv-cache-memory on the CPU (with --device cuda the engine takes that fraction of the GPU's
// free memory after loading the weights). InvalidArgument naming the flag when a value cannot work.
StatusOr<EngineConfig> MakeEngineConfig(const ServerOptions& options,
                                        int64_t available_memory_bytes);

}  // namespace tokenmill::server
