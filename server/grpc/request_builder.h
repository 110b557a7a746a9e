// From the wire to the engine: turns a v1 request's input into token ids and its fields
// into the engine's request, which the engine's validation (engine/request_validation.h, the
// one range check) then accepts or refuses; a refusal names the wire's field. Every refusal
// is INVALID_ARGUMENT (FAILED_PRECONDITION for a chat without a template) with a message
// naming the field and saying what to change. Pure: no engine, no gRPC.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/generate_request.h"
#include "engine/request_validation.h"
#include "grammar/grammar_cache.h"
#include "server/grpc/lora_table.h"
#include "text/chat/chat_template.h"
#include "text/chat/output_parser.h"
#include "text/tokenizer/tokenizer.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::server {

// What a request is checked against.
struct RequestContext {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat input is refused
  int max_model_len = 0;                        // prompt plus generated tokens
  // Compiles (and keeps) the grammars of structured output, for this model's vocabulary;
  // null: structured output is refused.
  grammar::GrammarCache* grammars = nullptr;
  // How chat output is parsed: the tool-call format (--tool-call-parser, or the template's;
  // none: calls are not parsed, nor forced) and whether <think> reasoning is split off
  // (--reasoning-parser, or whether the template uses <think>); harmony: the output is
  // gpt-oss's channels (--reasoning-parser / --tool-call-parser harmony, or the template's).
  std::optional<ToolCallFormat> tool_call_format;
  // The tools go into the prompt as a preamble (ServingModel::generic_tool_preamble).
  bool generic_tool_preamble = false;
  bool reasoning = false;
  bool harmony = false;
  // Special-token text anywhere in a rendered chat becomes control tokens, also in what the
  // client wrote (--parse-special-in-content); false: only in the template's markup.
  bool parse_special_in_content = false;
  bool speculative_decoding = false;  // the engine's: it refuses kv_window
  bool embeddings_only = false;       // the engine's: an encoder refuses generations
  bool has_classifier = false;        // the engine's: a reranker's head
  // Whose request it is ("" for anonymous; server/grpc/caller_identity.h) and whether the
  // server shares cached prefixes across tenants (--shared-prefix-cache): the request's
  // tenant and its prefix-cache salt (PrefixCacheSalt).
  std::string tenant = {};
  bool shared_prefix_cache = false;
  // The names of the base model (served_model_names) and its adapters, for GenerateRequest.model.
  std::span<const std::string> model_names = {};
  const LoraTable* loras = nullptr;  // none: the model has no adapters

  // What the engine validates requests against (Engine::limits()).
  RequestLimits limits() const {
    return {.max_model_len = max_model_len,
            .vocab_size = tokenizer->vocab_size(),
            .speculative_decoding = speculative_decoding,
            .embeddings_only = embeddings_only,
            .has_classifier = has_classifier};
  }
};

// The prefix-cache salt of a request of `tenant` with the client's `client_salt`: requests
// share cached prefixes only when these are equal. Private (the default): the tenant,
// length-prefixed, then the client's salt, so a client's salt only subdivides its own
// tenant's space and no client salt yields another tenant's; an anonymous request without a
// salt keeps the empty one (its blocks' keys stay recomputable by KV-aware routers). Shared (--shared-prefix-cache):
// the client's salt alone, so tenants share prefixes (and can tell from cached_tokens and
// latency whether another tenant sent a prompt).
std::string PrefixCacheSalt(std::string_view tenant, std::string_view client_salt,
                            bool shared_prefix_cache);

inline constexpr uint32_t kDefaultMaxTokens = 16;
inline constexpr size_t kMaxRequestIdBytes = 256;

// The prompt text of chat messages, rendered with the chat template. Messages reach it as
// Hugging Face templates expect them: an assistant's tool_calls as [{"id", "type":
// "function", "function": {"name", "arguments": <an object>}}], its reasoning as
// reasoning_content, a tool message's tool_call_id and name; template_kwargs_json's keys
// as variables. The tools are left out with tool_choice NONE; with `generic_tool_preamble`
// they also go into the system message as the generic preamble (text/chat/tool_preamble.h).
StatusOr<std::string> RenderChat(const v1::Chat& chat, const ChatTemplate* chat_template,
                                 bool generic_tool_preamble = false);
// The same, marking the bytes the template wrote (ChatTemplate::RenderMarked).
StatusOr<jinja::MarkedText> RenderChatMarked(const v1::Chat& chat,
                                             const ChatTemplate* chat_template,
                                             bool generic_tool_preamble = false);

struct TokenizedPrompt {
  std::string text;  // empty for token id input
  std::vector<TokenId> token_ids;
};

// Tokenize's input as token ids: text with the model's special tokens (unless
// add_special_tokens is false), chat rendered and tokenized with its markup parsed.
StatusOr<TokenizedPrompt> TokenizeRequestInput(const v1::TokenizeRequest& request,
                                               const RequestContext& context);

// The compiled grammar of sampling.structured_output (null when unset), through the cache. A
// bad constraint, or one over the caps, is INVALID_ARGUMENT beginning
// "structured_output.<kind>: " and naming the keyword and path, line:column or offset.
StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileStructuredOutput(
    const v1::SamplingParams& sampling, grammar::GrammarCache* grammars);

// Whether building `request` compiles a grammar (structured output, or a forced tool call),
// which may take long: it is built off gRPC's threads.
bool CompilesGrammar(const v1::GenerateRequest& request);

// The id of the adapter GenerateRequest.model names (GenerateRequest::lora): 0 for none or a
// name of the base model; NOT_FOUND naming the served names for another name.
StatusOr<int> LoraOf(std::string_view model, const RequestContext& context);

// The engine request for `request` (all but its sink), validated by the engine's checks
// against context.limits(): Engine::Submit takes it as it is. Without max_tokens it gets
// 16, or with max_tokens_rest_of_context the context length minus the prompt's tokens. Its
// grammar is compiled last, once everything else passed. A chat request's output is parsed
// (GenerateRequest::output_parsing) when tools are offered or the model reasons. A forced
// tool call (tool_choice REQUIRED or a function) is a grammar; after a prompt that opens
// <think>, a grammar starts after the model's </think>.
StatusOr<ValidatedRequest> BuildGenerateRequest(const v1::GenerateRequest& request,
                                                const RequestContext& context);

}  // namespace tokenmill::server
