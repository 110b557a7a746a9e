// What a running server serves: the model, its tokenizer and chat template, and the engine
// over them. Loaded once at startup; read-only afterwards except through the engine.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "server/grpc/build_queue.h"
#include "server/grpc/embed_request.h"
#include "server/grpc/lora_table.h"
#include "model/model.h"
#include "server/grpc/server_options.h"
#include "text/chat/chat_template.h"
#include "text/chat/tool_call_parser.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill::server {

struct ServingModel {
  ServingModel(std::unique_ptr<Model> m, Tokenizer t)
      : model(std::move(m)), tokenizer(std::move(t)) {}
  ~ServingModel();  // stops the engine before what it reads goes away

  std::unique_ptr<Model> model;
  std::unique_ptr<Model> draft_model;  // --spec draft only
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;  // none: chat input is refused
  // How chat output is parsed (RequestContext): --tool-call-parser / --reasoning-parser, or
  // what the template shows.
  std::optional<ToolCallFormat> tool_call_format;
  // The template ignores `tools` (--tool-call-parser auto): a preamble lists them and asks for
  // plain JSON calls (tool_call_format kJson; text/chat/tool_preamble.h).
  bool generic_tool_preamble = false;
  bool reasoning = false;
  bool harmony = false;  // gpt-oss's channels: HarmonyParser splits reasoning and calls
  bool parse_special_in_content = false;  // --parse-special-in-content
  // How Embed pools (--pooling, else the GGUF's pooling_type); kNone or kRank: Embed refuses.
  Pooling pooling = Pooling::kNone;
  // The LoRA adapters served by name, each with its engine id (GenerateRequest.lora): --lora's
  // and the admin's (server/grpc/lora_admin.h). Never null; it outlives a reload of the model.
  std::shared_ptr<LoraTable> loras;
  // How Rerank writes a query and a document (the GGUF's tokenizer.chat_template.rerank).
  RerankFormat rerank_format;
  // The names clients call it by (ServedModelNamesOf); `name`, the first, is its id in the
  // API, the metrics and the KV events' topic.
  std::vector<std::string> served_model_names;
  std::string name;
  int64_t created_unix_seconds = 0;  // when loading began: /v1/models' `created`
  int block_size = 0;
  // Structured output's compiled grammars over this model's vocabulary (request threads).
  std::unique_ptr<grammar::GrammarCache> grammars;
  std::unique_ptr<Engine> engine;
  // Builds the requests with structured output (their grammars compile there). Declared
  // last: it is joined first, while the engine and the cache its jobs use still exist.
  std::unique_ptr<BuildQueue> build_queue;
};

// Loads the model file, tokenizer and chat template and starts the engine, logging each
// step; the grammar cache holds up to `grammar_cache_bytes` (GrammarCacheBudgetOf). The engine
// runs the adapters `loras` serves (LoraTableOf's at first; the admin's too at a reload).
// Errors name the file or the flag to change.
StatusOr<std::unique_ptr<ServingModel>> LoadServingModel(const ServerOptions& options,
                                                         const EngineConfig& engine_config,
                                                         int64_t grammar_cache_bytes,
                                                         std::shared_ptr<LoraTable> loras);

// The table of --lora's adapters (ids 1, 2, ... in flag order), holding up to --max-loras.
// InvalidArgument naming the flag for a malformed NAME=PATH or more adapters than that.
StatusOr<std::shared_ptr<LoraTable>> LoraTableOf(const ServerOptions& options);

}  // namespace tokenmill::server
