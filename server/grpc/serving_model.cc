#include "server/grpc/serving_model.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "common/byte_size.h"
#include "engine/grammar_vocabulary.h"
#include "model/lora.h"
#include "model/weights.h"
#include "text/chat/harmony_parser.h"
#include "text/chat/reasoning_parser.h"
#include "text/chat/tool_preamble.h"

namespace tokenmill::server {
namespace {

// Grammars compiling at once; more wait in the build queue (the cache serves repeats at once).
constexpr int kStructuredOutputBuildThreads = 2;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Key biases this far above their layer's median leave a quantized KV cache's codes to one
// channel: Qwen2.5-Coder-1.5B's (354 against 0.69) take its perplexity from 1.8 to 1265 with
// q4_0 KV, in llama.cpp too (docs/benchmarks.md).
constexpr float kKeyOutlierRatio = 100.0f;

// Warns when a quantized KV cache meets such keys, saying what to use instead.
void WarnOfKeyOutliers(const Model& model, KvType kv_type) {
  if (kv_type == KvType::kF16 || kv_type == KvType::kF32) return;
  const std::optional<KeyBiasPeak> peak = LargestKeyBias(model.weights());
  if (!peak || peak->max_abs <= kKeyOutlierRatio * peak->median_abs) return;
  spdlog::warn(
      "--kv-cache-dtype {}: this model's key biases reach {:.1f} (layer {}; its median {:.2f}), "
      "which a quantized KV cache cannot hold: its output will degrade, with 4-bit types beyond "
      "use; --kv-cache-dtype f16 keeps it exact",
      KvTypeName(kv_type), peak->max_abs, peak->layer, peak->median_abs);
}

// general.name, shown in the log beside the names the model is served under.
std::string GeneralName(const GgufFile& file) {
  if (!file.Has("general.name")) return "";
  StatusOr<std::string_view> name = file.GetString("general.name");
  return name.ok() ? std::string(*name) : "";
}

int64_t UnixSecondsNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The chat output parsers the flags ask for, or the ones the chat template's markup shows.
void ChooseOutputParsers(const ServerOptions& options, ServingModel& serving) {
  const std::string_view source =
      serving.chat_template ? std::string_view(serving.chat_template->source()) : "";
  if (options.tool_call_parser == "auto") {
    serving.tool_call_format = DetectToolCallFormat(source);
    // A template that ignores `tools` would drop them: our preamble asks for plain JSON calls.
    // So too where it shows DeepSeek's markup but never the tools (R1's, V3.1's): its model
    // would not know them.
    const bool markup_only = serving.tool_call_format == ToolCallFormat::kDeepSeekV3 ||
                             serving.tool_call_format == ToolCallFormat::kDeepSeekV31;
    serving.generic_tool_preamble =
        serving.chat_template && !TemplateRendersTools(source) &&
        (serving.tool_call_format == ToolCallFormat::kJson || markup_only);
    if (serving.generic_tool_preamble) serving.tool_call_format = ToolCallFormat::kJson;
  } else if (options.tool_call_parser != "none") {
    serving.tool_call_format = ToolCallFormatFromName(options.tool_call_parser);
  }
  const bool harmony_reasoning =
      options.reasoning_parser == "harmony" ||
      (options.reasoning_parser == "auto" && TemplateUsesHarmony(source));
  serving.reasoning = harmony_reasoning || options.reasoning_parser == "think" ||
                      (options.reasoning_parser == "auto" && TemplateHasThinkTags(source));
  serving.harmony = harmony_reasoning || serving.tool_call_format == ToolCallFormat::kHarmony;
  std::string tool_calls =
      serving.tool_call_format ? std::string(ToolCallFormatName(*serving.tool_call_format)) : "none";
  if (serving.generic_tool_preamble) {
    tool_calls = "generic preamble (the chat template has no tools)";
  } else if (options.tool_call_parser == "auto") {
    tool_calls += " (from the chat template)";
  }
  spdlog::info("chat output: tool calls: {}, reasoning {}", tool_calls,
               !serving.reasoning ? "none" : harmony_reasoning ? "harmony" : "<think>");
}

// The adapters `serving.loras` serves, each loaded over the model for the engine, by id. One
// of --lora's that fails fails the load; one the admin loaded is dropped with a warning (its
// file went away since).
StatusOr<std::map<int, std::shared_ptr<const LoraAdapter>>> LoadLoras(
    const ServerOptions& options, const ServingModel& serving) {
  std::map<int, std::shared_ptr<const LoraAdapter>> adapters;
  const int startup = static_cast<int>(options.lora_adapters.size());
  for (const LoraTable::Entry& lora : serving.loras->Live()) {
    const auto start = std::chrono::steady_clock::now();
    StatusOr<std::unique_ptr<LoraAdapter>> adapter = LoraAdapter::Load(
        lora.path, *serving.model,
        options.lora_weights == "q8_0" ? LoraWeights::kQ8_0 : LoraWeights::kF32);
    if (!adapter.ok() && lora.id <= startup) {
      return InvalidArgumentError("--lora " + lora.name + "=" + lora.path + ": " +
                                  adapter.status().message());
    }
    if (!adapter.ok()) {
      spdlog::warn("LoRA adapter {} is no longer served: {}: {}", lora.name, lora.path,
                   adapter.status().message());
      (void)serving.loras->Remove(lora.name);
      continue;
    }
    spdlog::info("LoRA adapter {}: {} matrices adapted, {} ({:.2f} s)", lora.name,
                 (*adapter)->num_pairs(), lora.path, SecondsSince(start));
    adapters.emplace(lora.id, std::move(*adapter));
  }
  return adapters;
}

}  // namespace

ServingModel::~ServingModel() {
  if (engine) engine->Shutdown(std::chrono::milliseconds(0));
  engine.reset();
}

StatusOr<std::shared_ptr<LoraTable>> LoraTableOf(const ServerOptions& options) {
  std::vector<std::pair<std::string, std::string>> startup;
  for (const std::string& flag : options.lora_adapters) {
    const size_t equals = flag.find('=');
    if (equals == 0 || equals == std::string::npos || equals + 1 == flag.size()) {
      return InvalidArgumentError("--lora " + flag + ": give NAME=PATH");
    }
    const std::string name = flag.substr(0, equals);
    if (std::ranges::any_of(startup, [&](const auto& lora) { return lora.first == name; })) {
      return InvalidArgumentError("--lora " + flag + ": the name " + name + " is taken");
    }
    startup.emplace_back(name, flag.substr(equals + 1));
  }
  if (startup.size() > static_cast<size_t>(options.max_loras)) {
    return InvalidArgumentError(std::to_string(startup.size()) + " --lora adapters, over "
                                "--max-loras " + std::to_string(options.max_loras) +
                                ": raise --max-loras");
  }
  return std::make_shared<LoraTable>(static_cast<size_t>(options.max_loras), startup);
}

StatusOr<std::unique_ptr<ServingModel>> LoadServingModel(const ServerOptions& options,
                                                         const EngineConfig& engine_config,
                                                         int64_t grammar_cache_bytes,
                                                         std::shared_ptr<LoraTable> loras) {
  const int64_t created = UnixSecondsNow();
  TM_ASSIGN_OR_RETURN(std::vector<std::string> served_names, ServedModelNamesOf(options));
  auto start = std::chrono::steady_clock::now();
  spdlog::info("loading model {}", options.model_path);
  TM_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(options.model_path, {.context = options.max_model_len}));
  const ModelConfig& config = model->config();
  spdlog::info(
      "model: {} layers, {} hidden, {} heads ({} KV), vocab {}, context {}; {} of quantized weights "
      "regrouped for the CPU kernels ({:.2f} s)",
      config.n_layers, config.n_embd, config.n_heads, config.n_kv_heads, config.n_vocab,
      config.context_length, FormatBytes(model->cpu_copy_bytes()), SecondsSince(start));
  spdlog::info("weights by type: {}", FormatTypeMix(TypeMix(model->file())));
  const ParameterCount parameters = CountParameters(model->file(), config);
  spdlog::info("parameters: {} in all, {} active per token{}", parameters.total,
               parameters.active_per_token,
               config.experts.n_expert > 0
                   ? " (" + std::to_string(config.experts.n_used) + " of " +
                         std::to_string(config.experts.n_expert) + " experts per token)"
                   : std::string());

  start = std::chrono::steady_clock::now();
  TM_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(model->file()));
  spdlog::info("tokenizer: {} {}, {} tokens ({:.2f} s)", tokenizer.model_name(),
               tokenizer.pre_tokenizer_name(), tokenizer.vocab_size(), SecondsSince(start));
  auto serving = std::make_unique<ServingModel>(std::move(model), std::move(tokenizer));
  serving->served_model_names = std::move(served_names);
  serving->name = serving->served_model_names.front();
  serving->created_unix_seconds = created;
  serving->pooling = options.pooling == "auto" ? serving->model->config().pooling
                                               : *PoolingFromName(options.pooling);
  if (StatusOr<std::string_view> rerank =
          serving->model->file().GetString("tokenizer.chat_template.rerank");
      rerank.ok()) {
    serving->rerank_format.template_text = std::string(*rerank);
  }
  if (const std::string general = GeneralName(serving->model->file()); !general.empty()) {
    spdlog::info("model name in the file: {}", general);
  }

  start = std::chrono::steady_clock::now();
  serving->grammars = std::make_unique<grammar::GrammarCache>(
      grammar::VocabularyIndex::Build(GrammarVocabulary(serving->tokenizer)),
      GrammarLimitsOf(options), grammar_cache_bytes);
  serving->build_queue = std::make_unique<BuildQueue>(kStructuredOutputBuildThreads);
  spdlog::info("structured output: vocabulary trie of {} nodes ({:.2f} s), {} compile threads, "
               "{} MiB of compiled grammars cached",
               serving->grammars->vocab()->trie_size(), SecondsSince(start),
               kStructuredOutputBuildThreads, grammar_cache_bytes >> 20);

  if (!options.chat_template_path.empty()) {
    TM_ASSIGN_OR_RETURN(ChatSpecialTokens tokens,
                        ChatSpecialTokensFromGguf(serving->model->file()));
    TM_ASSIGN_OR_RETURN(ChatTemplate chat_template,
                        ChatTemplate::FromFile(options.chat_template_path, std::move(tokens)));
    serving->chat_template.emplace(std::move(chat_template));
    spdlog::info("chat template: {}", options.chat_template_path);
  } else if (StatusOr<ChatTemplate> own = ChatTemplate::FromGguf(serving->model->file());
             own.ok()) {
    serving->chat_template.emplace(std::move(*own));
    spdlog::info("chat template: the model's own");
  } else {
    spdlog::warn("chat input is refused: {}", own.status().message());
  }
  ChooseOutputParsers(options, *serving);
  serving->parse_special_in_content = options.parse_special_in_content;
  if (options.parse_special_in_content) {
    spdlog::warn("--parse-special-in-content: special-token text in chat messages becomes "
                 "control tokens; clients can write turns of any role");
  }

  if (!options.draft_model_path.empty()) {
    start = std::chrono::steady_clock::now();
    spdlog::info("loading draft model {}", options.draft_model_path);
    StatusOr<std::unique_ptr<Model>> draft = Model::Load(options.draft_model_path, {.context = options.max_model_len});
    if (!draft.ok()) {
      return InvalidArgumentError("--draft-model " + options.draft_model_path + ": " +
                                  draft.status().message());
    }
    serving->draft_model = std::move(*draft);
    spdlog::info("draft model: {} layers, {} hidden, vocab {} ({:.2f} s)",
                 serving->draft_model->config().n_layers, serving->draft_model->config().n_embd,
                 serving->draft_model->config().n_vocab, SecondsSince(start));
  }

  serving->loras = std::move(loras);
  EngineConfig with_loras = engine_config;
  TM_ASSIGN_OR_RETURN(with_loras.lora_adapters, LoadLoras(options, *serving));
  WarnOfKeyOutliers(*serving->model, engine_config.kv_type);
  start = std::chrono::steady_clock::now();
  if (engine_config.spec.method != SpecMethod::kNone) {
    spdlog::info("speculative decoding: {}, up to {} draft tokens per step",
                 SpecMethodName(engine_config.spec.method),
                 engine_config.spec.num_speculative_tokens);
  }
  spdlog::info(
      "starting the engine on {}: KV cache {} of {} in blocks of {} tokens, prefix cache {}",
      engine_config.device == Device::kCuda ? "cuda" : "cpu",
      engine_config.kv_cache_fraction > 0
          ? MemoryBudget::FractionOfFree(engine_config.kv_cache_fraction).ToString()
          : FormatBytes(engine_config.kv_cache_bytes),
      engine_config.v_type() == engine_config.kv_type
          ? std::string(KvTypeName(engine_config.kv_type))
          : "K " + std::string(KvTypeName(engine_config.kv_type)) + " / V " +
                std::string(KvTypeName(engine_config.v_type())),
      engine_config.block_size,
      engine_config.enable_prefix_caching ? "on" : "off");
  TM_ASSIGN_OR_RETURN(serving->engine,
                      Engine::Create(*serving->model, serving->tokenizer, with_loras,
                                     serving->draft_model.get()));
  serving->block_size = engine_config.block_size;
  const EngineStats stats = serving->engine->Stats();
  spdlog::info("engine ready: {} KV blocks, max {} tokens per request ({:.2f} s)",
               stats.num_kv_blocks, serving->engine->max_model_len(), SecondsSince(start));
  return serving;
}

}  // namespace tokenmill::server
