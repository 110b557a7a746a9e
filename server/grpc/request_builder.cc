#include "server/grpc/request_builder.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <random>

#include "common/json_nesting.h"
#include "engine/request_validation.h"
#include "server/grpc/tool_call_grammar.h"
#include "text/chat/harmony_parser.h"
#include "text/chat/tool_preamble.h"

namespace tokenmill::server {
namespace {

// A wire count as the engine's int; past INT_MAX it stays out of range rather than wrapping.
int Saturated(int64_t value) {
  return static_cast<int>(std::min<int64_t>(value, std::numeric_limits<int>::max()));
}

// The engine's refusal with its field named as the wire names it: the engine begins a
// refusal with the field's name (engine/request_validation.h); two of them differ here.
Status InWireTerms(const Status& status) {
  constexpr std::pair<std::string_view, std::string_view> kWireNames[] = {
      {"prompt_token_ids", "token_ids.ids"}, {"stop_strings", "stop"}};
  const std::string& message = status.message();
  for (const auto& [engine_name, wire_name] : kWireNames) {
    if (message.starts_with(engine_name)) {
      return Status(status.code(), std::string(wire_name) + message.substr(engine_name.size()));
    }
  }
  return status;
}

// The chat prompt carries its own markup ("<|im_start|>"): parse it, add nothing more.
constexpr EncodeOptions kChatEncodeOptions{.add_special = false, .parse_special = true};

// A field of the request that holds JSON text, parsed; INVALID_ARGUMENT naming `field` when
// it nests deeper than the one bound on client JSON (common/json_nesting.h): the templates'
// values are copied, printed and compared recursively. Not JSON parses to a discarded value.
StatusOr<nlohmann::ordered_json> ParseJsonField(std::string_view text, const std::string& field) {
  if (JsonTextNestsDeeperThan(text)) return InvalidArgumentError(JsonNestingRefusal(field));
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// One message as the templates read it (see RenderChat).
StatusOr<nlohmann::ordered_json> TemplateMessage(const v1::ChatMessage& message, int index) {
  // A turn of tool calls alone has content null, as clients send it and templates test it.
  nlohmann::ordered_json out = {{"role", message.role()}, {"content", message.content()}};
  if (!message.has_content() && message.tool_calls_size() > 0) out["content"] = nullptr;
  if (!message.reasoning().empty()) out["reasoning_content"] = message.reasoning();
  if (message.tool_calls_size() > 0) {
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (int j = 0; j < message.tool_calls_size(); ++j) {
      const v1::ToolCall& call = message.tool_calls(j);
      const std::string field = "chat.messages[" + std::to_string(index) + "].tool_calls[" +
                                std::to_string(j) + "].arguments";
      TM_ASSIGN_OR_RETURN(nlohmann::ordered_json arguments,
                          ParseJsonField(call.arguments(), field));
      if (!arguments.is_object()) {
        return InvalidArgumentError(field + " must be a JSON object, as JSON text");
      }
      calls.push_back({{"id", call.id()},
                       {"type", "function"},
                       {"function", {{"name", call.name()}, {"arguments", std::move(arguments)}}}});
    }
    out["tool_calls"] = std::move(calls);
  }
  if (!message.tool_call_id().empty()) out["tool_call_id"] = message.tool_call_id();
  if (!message.name().empty()) out["name"] = message.name();
  return out;
}

// The messages as the templates read them. A tool message without a name gets the name of
// the call it answers, by its tool_call_id or else the earliest one unanswered (Hermes'
// template requires a name; clients such as openai-agents send none). A template that knows
// nothing of tools (a plain chat template) gets an assistant's calls as its content, in the
// plain-JSON form, so that the model still sees what it called. Harmony templates get the
// fields they read (below).
StatusOr<nlohmann::ordered_json> TemplateMessages(const v1::Chat& chat, std::string_view source) {
  const bool knows_tools = source.find("tool") != std::string_view::npos;
  const bool harmony = TemplateUsesHarmony(source);
  std::deque<const v1::ToolCall*> unanswered;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    TM_ASSIGN_OR_RETURN(nlohmann::ordered_json message, TemplateMessage(m, i));
    for (const v1::ToolCall& call : m.tool_calls()) unanswered.push_back(&call);
    if (m.role() == "tool") {
      auto answered =
          std::find_if(unanswered.begin(), unanswered.end(),
                       [&](const v1::ToolCall* c) { return c->id() == m.tool_call_id(); });
      if (answered == unanswered.end() && m.tool_call_id().empty()) answered = unanswered.begin();
      if (answered != unanswered.end()) {
        if (m.name().empty()) message["name"] = (*answered)->name();
        unanswered.erase(answered);
      }
    }
    // gpt-oss's template reads an assistant's reasoning as `thinking`, and tests `in
    // message.content` wherever the key exists, which a null content would fail.
    if (harmony && m.role() == "assistant") {
      if (!m.reasoning().empty()) message["thinking"] = m.reasoning();
      if (message["content"].is_null()) message.erase("content");
    }
    if (!knows_tools && message.contains("tool_calls")) {
      std::string text = m.content();
      for (const nlohmann::ordered_json& call : message["tool_calls"]) {
        if (!text.empty()) text += '\n';
        text += nlohmann::ordered_json{{"name", call["function"]["name"]},
                                       {"arguments", call["function"]["arguments"]}}
                    .dump();
      }
      message["content"] = std::move(text);
      message.erase("tool_calls");
    }
    out.push_back(std::move(message));
  }
  return out;
}

// A rendered chat's ids: special-token text is parsed in the template's markup only (unless
// the operator chose otherwise), so what the client wrote cannot forge a turn.
StatusOr<std::vector<TokenId>> EncodeRenderedChat(const jinja::MarkedText& rendered,
                                                  const RequestContext& context,
                                                  EncodeOptions options = kChatEncodeOptions) {
  const std::vector<TextRange> markup = PromptMarkup(rendered);
  if (!context.parse_special_in_content) options.special_token_ranges = &markup;
  return context.tokenizer->Encode(rendered.text, options);
}

StatusOr<std::vector<TokenId>> EncodeChat(const v1::Chat& chat, const RequestContext& context,
                                          std::string& prompt) {
  TM_ASSIGN_OR_RETURN(jinja::MarkedText rendered,
                      RenderChatMarked(chat, context.chat_template,
                                       context.generic_tool_preamble));
  TM_ASSIGN_OR_RETURN(std::vector<TokenId> ids, EncodeRenderedChat(rendered, context));
  prompt = std::move(rendered.text);
  return ids;
}

// The wire's sampling fields into `out`; unset ones keep the engine's neutral defaults. The
// ranges are checked by the engine's ValidateGenerateRequest, which names each field.
void CopySampling(const v1::SamplingParams& s, SamplingParams& out) {
  if (s.has_temperature()) out.temperature = s.temperature();
  if (s.has_top_p()) out.top_p = s.top_p();
  if (s.has_top_k()) out.top_k = s.top_k();
  if (s.has_min_p()) out.min_p = s.min_p();
  if (s.has_repetition_penalty()) out.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) out.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) out.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) out.seed = s.seed();
  out.min_tokens = Saturated(s.min_tokens());
  for (const auto& [id, bias] : s.logit_bias()) out.logit_bias.emplace_back(id, bias);
  // Map order is unspecified: sort, so the same request always builds the same params.
  std::sort(out.logit_bias.begin(), out.logit_bias.end());
}

grammar::GrammarSpec::Kind KindOf(v1::SamplingParams::StructuredOutputCase which) {
  using Kind = grammar::GrammarSpec::Kind;
  switch (which) {
    case v1::SamplingParams::kJsonSchema: return Kind::kJsonSchema;
    case v1::SamplingParams::kJsonObject: return Kind::kJsonObject;
    case v1::SamplingParams::kRegex: return Kind::kRegex;
    case v1::SamplingParams::kChoice: return Kind::kChoice;
    case v1::SamplingParams::kGrammar: break;
    case v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET: break;
  }
  return Kind::kGbnf;
}

bool ForcesToolCall(const v1::ToolChoice& choice) {
  return choice.has_function_name() || choice.mode() == v1::TOOL_CHOICE_MODE_REQUIRED;
}

bool OffersTools(const v1::Chat& chat) {
  return !chat.tools_json().empty() && chat.tool_choice().mode() != v1::TOOL_CHOICE_MODE_NONE;
}

// How the output of a chat request is parsed; none when nothing applies to it.
StatusOr<std::optional<OutputParserOptions>> ChatOutputParsing(
    const v1::GenerateRequest& request, const RequestContext& context,
    const std::string& prompt) {
  const v1::Chat& chat = request.chat();
  if (ForcesToolCall(chat.tool_choice())) {
    if (chat.tools_json().empty()) {
      return InvalidArgumentError("chat.tool_choice forces a tool call but chat.tools_json "
                                  "has no tools: give the tools");
    }
    if (!context.tool_call_format) {
      return InvalidArgumentError("chat.tool_choice: this server parses no tool calls "
                                  "(--tool-call-parser none): use tool_choice auto or none");
    }
    if (request.sampling().structured_output_case() !=
        v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET) {
      return InvalidArgumentError("chat.tool_choice forces a tool call, which "
                                  "sampling.structured_output would constrain too: give one");
    }
  }
  OutputParserOptions options;
  if (OffersTools(chat)) options.tool_calls = context.tool_call_format;
  options.reasoning = context.reasoning;
  options.harmony = context.harmony;
  options.starts_in_reasoning = context.reasoning && !context.harmony && PromptOpensThink(prompt);
  // A named function is one call; false: only the first call counts.
  options.parallel = !chat.tool_choice().has_function_name() &&
                     (!chat.has_parallel_tool_calls() || chat.parallel_tool_calls());
  options.seed = std::random_device{}();
  if (!options.tool_calls && !options.reasoning && !options.harmony) {
    return std::optional<OutputParserOptions>();
  }
  return std::optional<OutputParserOptions>(options);
}

// The tool-call markers that are control tokens in this vocabulary (Llama 3.1's
// <|python_tag|>, Mistral's [TOOL_CALLS]): the output renders them for the parser, which
// keeps them out of the content.
std::vector<TokenId> RenderToolCallMarkers(const Tokenizer& tokenizer,
                                           OutputParserOptions& options) {
  std::vector<TokenId> rendered;
  for (const std::string_view marker : ToolCallMarkers(*options.tool_calls)) {
    const TokenId id = tokenizer.vocab().Find(marker);
    if (id == kNoToken || tokenizer.vocab().type(id) != TokenType::kControl) continue;
    rendered.push_back(id);
    options.hidden_markers.emplace_back(marker);
  }
  return rendered;
}

StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileForcedToolCall(
    const v1::Chat& chat, const RequestContext& context) {
  if (context.grammars == nullptr) {
    return FailedPreconditionError("chat.tool_choice: this server does not offer grammars, "
                                   "which force tool calls");
  }
  const bool parallel = !chat.tool_choice().has_function_name() &&
                        (!chat.has_parallel_tool_calls() || chat.parallel_tool_calls());
  TM_ASSIGN_OR_RETURN(std::string gbnf,
                      ForcedToolCallGbnf(*context.tool_call_format, chat.tools_json(),
                                         chat.tool_choice().function_name(), parallel,
                                         context.grammars->limits()));
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
      context.grammars->GetOrCompile({.kind = grammar::GrammarSpec::Kind::kGbnf,
                                      .text = std::move(gbnf),
                                      .choices = {}});
  if (!compiled.ok()) {
    return InvalidArgumentError("chat.tools_json: " + compiled.status().message());
  }
  return compiled;
}

// The prompt that continues the final assistant message: the conversation before it with the
// generation prompt, then its text. Only where the template renders that message as exactly
// this opening and text (then its closing), so the model sees its own turn's shape.
StatusOr<jinja::MarkedText> RenderContinuation(const v1::Chat& chat, ChatRequest request,
                                               const ChatTemplate& chat_template) {
  const v1::ChatMessage& last = chat.messages(chat.messages_size() - 1);
  constexpr std::string_view kField = "chat.continue_final_message: ";
  if (chat.has_add_generation_prompt() && chat.add_generation_prompt()) {
    return InvalidArgumentError(std::string(kField) +
                                "the prompt ends inside the last message: unset "
                                "add_generation_prompt");
  }
  if (last.role() != "assistant" || last.tool_calls_size() > 0 || chat.messages_size() < 2) {
    return InvalidArgumentError(std::string(kField) +
                                "the last message must be the assistant's text (no tool calls), "
                                "after the conversation it answers");
  }
  ChatRequest opening = request;
  opening.messages.erase(opening.messages.size() - 1);
  opening.add_generation_prompt = true;
  request.add_generation_prompt = false;
  StatusOr<jinja::MarkedText> head = chat_template.RenderMarked(opening);
  if (!head.ok()) return Status(head.status().code(), "chat: " + head.status().message());
  StatusOr<std::string> whole = chat_template.Render(request);
  if (!whole.ok()) return Status(whole.status().code(), "chat: " + whole.status().message());
  jinja::MarkedText prompt = std::move(*head);
  prompt.text += last.content();  // the client's: no markup
  if (!whole->starts_with(prompt.text)) {
    return InvalidArgumentError(std::string(kField) +
                                "this model's chat template does not render an assistant "
                                "message as its turn's opening followed by the text, so the "
                                "text cannot be continued: end with a user message");
  }
  return prompt;
}

}  // namespace

std::string PrefixCacheSalt(std::string_view tenant, std::string_view client_salt,
                            bool shared_prefix_cache) {
  // No salt at all stays "", so a single-tenant server's blocks keep the keys KV-aware
  // routers recompute from token ids (docs/api.md, KV cache events).
  if (shared_prefix_cache || (tenant.empty() && client_salt.empty())) {
    return std::string(client_salt);
  }
  // "<bytes>:<tenant><client salt>": the length ends the tenant, so no (tenant, salt) pair
  // spells another's.
  std::string salt = std::to_string(tenant.size());
  salt += ':';
  salt += tenant;
  salt += client_salt;
  return salt;
}

StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileStructuredOutput(
    const v1::SamplingParams& sampling, grammar::GrammarCache* grammars) {
  const v1::SamplingParams::StructuredOutputCase which = sampling.structured_output_case();
  if (which == v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET) {
    return std::shared_ptr<const grammar::CompiledGrammar>();
  }
  grammar::GrammarSpec spec{.kind = KindOf(which), .text = {}, .choices = {}};
  const std::string where = "structured_output." + std::string(GrammarKindName(spec.kind));
  switch (which) {
    case v1::SamplingParams::kJsonSchema: spec.text = sampling.json_schema(); break;
    case v1::SamplingParams::kRegex: spec.text = sampling.regex(); break;
    case v1::SamplingParams::kGrammar: spec.text = sampling.grammar(); break;
    case v1::SamplingParams::kChoice:
      spec.choices.assign(sampling.choice().choices().begin(), sampling.choice().choices().end());
      if (spec.choices.empty()) return InvalidArgumentError(where + ": give at least one choice");
      break;
    default: break;
  }
  if (grammars == nullptr) {
    return FailedPreconditionError(where + ": this server does not offer structured output");
  }
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
      grammars->GetOrCompile(spec);
  // Over a cap is the request's fault too: a 400, not a retry-later.
  if (!compiled.ok()) return InvalidArgumentError(where + ": " + compiled.status().message());
  return compiled;
}

StatusOr<std::string> RenderChat(const v1::Chat& chat, const ChatTemplate* chat_template,
                                 bool generic_tool_preamble) {
  TM_ASSIGN_OR_RETURN(jinja::MarkedText rendered,
                      RenderChatMarked(chat, chat_template, generic_tool_preamble));
  return std::move(rendered.text);
}

StatusOr<jinja::MarkedText> RenderChatMarked(const v1::Chat& chat,
                                             const ChatTemplate* chat_template,
                                             bool generic_tool_preamble) {
  if (chat.messages().empty()) return InvalidArgumentError("chat.messages is empty");
  // proto3 enums are open: a number no version of the API defines arrives as it was sent.
  if (!v1::ToolChoiceMode_IsValid(chat.tool_choice().mode())) {
    return InvalidArgumentError("chat.tool_choice.mode " +
                                std::to_string(chat.tool_choice().mode()) +
                                " is not a ToolChoiceMode: send AUTO (0), NONE (1) or REQUIRED (2)");
  }
  if (chat_template == nullptr) {
    return FailedPreconditionError(
        "this model has no chat template: send text or token_ids, or start the server with "
        "--chat-template FILE");
  }
  ChatRequest request;
  TM_ASSIGN_OR_RETURN(request.messages, TemplateMessages(chat, chat_template->source()));
  request.add_generation_prompt =
      chat.has_add_generation_prompt() ? chat.add_generation_prompt() : true;
  if (!chat.template_kwargs_json().empty()) {
    TM_ASSIGN_OR_RETURN(request.extra_variables,
                        ParseJsonField(chat.template_kwargs_json(), "chat.template_kwargs_json"));
    if (!request.extra_variables.is_object()) {
      return InvalidArgumentError("chat.template_kwargs_json must be a JSON object of template "
                                  "variables");
    }
  }
  if (!chat.tools_json().empty() && chat.tool_choice().mode() != v1::TOOL_CHOICE_MODE_NONE) {
    TM_ASSIGN_OR_RETURN(request.tools, ParseJsonField(chat.tools_json(), "chat.tools_json"));
    if (!request.tools.is_array()) {
      return InvalidArgumentError("chat.tools_json must be a JSON array of tool definitions");
    }
    // Client text (schemas, descriptions) inside a message: tokenized as text, never markup.
    if (generic_tool_preamble) {
      request.messages = WithGenericToolPreamble(std::move(request.messages), request.tools);
    }
  }
  if (chat.continue_final_message()) {
    return RenderContinuation(chat, std::move(request), *chat_template);
  }
  StatusOr<jinja::MarkedText> prompt = chat_template->RenderMarked(request);
  if (!prompt.ok()) {
    return Status(prompt.status().code(), "chat: " + prompt.status().message());
  }
  return prompt;
}

StatusOr<TokenizedPrompt> TokenizeRequestInput(const v1::TokenizeRequest& request,
                                               const RequestContext& context) {
  TokenizedPrompt out;
  switch (request.input_case()) {
    case v1::TokenizeRequest::kText: {
      out.text = request.text();
      const EncodeOptions options{
          .add_special = request.has_add_special_tokens() ? request.add_special_tokens() : true,
          .parse_special = request.parse_special()};
      TM_ASSIGN_OR_RETURN(out.token_ids, context.tokenizer->Encode(out.text, options));
      return out;
    }
    case v1::TokenizeRequest::kChat: {
      TM_ASSIGN_OR_RETURN(jinja::MarkedText rendered,
                          RenderChatMarked(request.chat(), context.chat_template,
                                           context.generic_tool_preamble));
      EncodeOptions options = kChatEncodeOptions;
      if (request.has_add_special_tokens()) options.add_special = request.add_special_tokens();
      TM_ASSIGN_OR_RETURN(out.token_ids, EncodeRenderedChat(rendered, context, options));
      out.text = std::move(rendered.text);
      return out;
    }
    case v1::TokenizeRequest::INPUT_NOT_SET:
      break;
  }
  return InvalidArgumentError("set text or chat");
}

bool CompilesGrammar(const v1::GenerateRequest& request) {
  return request.sampling().structured_output_case() !=
             v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET ||
         (request.has_chat() && ForcesToolCall(request.chat().tool_choice()));
}

StatusOr<int> LoraOf(std::string_view model, const RequestContext& context) {
  if (model.empty() || std::ranges::find(context.model_names, model) != context.model_names.end()) {
    return 0;
  }
  if (context.loras != nullptr) {
    if (const std::optional<int> id = context.loras->IdOf(model)) return *id;
  }
  std::string names;
  for (const std::string& name : context.model_names) names += " '" + name + "'";
  if (context.loras != nullptr) {
    for (const std::string& name : context.loras->Names()) names += " '" + name + "'";
  }
  return NotFoundError("model '" + std::string(model) + "' is not served here: name one of" +
                       names + " (or none)");
}

StatusOr<ValidatedRequest> BuildGenerateRequest(const v1::GenerateRequest& request,
                                                const RequestContext& context) {
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return InvalidArgumentError("request_id is longer than " +
                                std::to_string(kMaxRequestIdBytes) + " bytes");
  }
  GenerateRequest out;
  std::optional<OutputParserOptions> chat_parsing;
  switch (request.input_case()) {
    case v1::GenerateRequest::kText: {
      if (request.text().empty()) {
        return InvalidArgumentError("text is empty: give the prompt to continue");
      }
      TM_ASSIGN_OR_RETURN(out.prompt_token_ids, context.tokenizer->Encode(request.text()));
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      if (request.token_ids().ids().empty()) {
        return InvalidArgumentError("token_ids.ids is empty: give the prompt's token ids");
      }
      out.prompt_token_ids.assign(request.token_ids().ids().begin(),
                                  request.token_ids().ids().end());
      break;
    }
    case v1::GenerateRequest::kChat: {
      std::string prompt;
      TM_ASSIGN_OR_RETURN(out.prompt_token_ids, EncodeChat(request.chat(), context, prompt));
      TM_ASSIGN_OR_RETURN(chat_parsing, ChatOutputParsing(request, context, prompt));
      if (chat_parsing && chat_parsing->tool_calls) {
        out.rendered_control_tokens = RenderToolCallMarkers(*context.tokenizer, *chat_parsing);
      }
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return InvalidArgumentError("no input: set text, token_ids or chat");
  }
  if (out.prompt_token_ids.empty()) {
    return InvalidArgumentError("the prompt has no tokens: give a longer text");
  }

  // The fields as the wire gives them; the engine's validation below checks their ranges.
  const int64_t prompt_tokens = static_cast<int64_t>(out.prompt_token_ids.size());
  int64_t max_tokens = kDefaultMaxTokens;
  if (request.has_max_tokens()) {
    max_tokens = request.max_tokens();
  } else if (request.max_tokens_rest_of_context()) {
    // Counted after templating and tokenizing; a prompt that fills the context is refused
    // below for its length.
    max_tokens = std::max<int64_t>(1, context.max_model_len - prompt_tokens);
  }
  out.sampling.max_tokens = Saturated(max_tokens);
  out.sampling.logprobs = request.logprobs();
  out.sampling.top_logprobs = Saturated(request.top_logprobs());
  if (request.has_prompt_logprobs()) {
    out.sampling.prompt_logprobs = Saturated(request.prompt_logprobs());
  }
  out.n = request.has_n() ? Saturated(request.n()) : 1;
  if (request.has_beam_search()) {
    out.beam_search = BeamSearchParams{};
    if (request.beam_search().has_length_penalty()) {
      out.beam_search->length_penalty = request.beam_search().length_penalty();
    }
  }
  CopySampling(request.sampling(), out.sampling);
  out.sampling.stop_token_ids.assign(request.stop_token_ids().begin(),
                                     request.stop_token_ids().end());
  out.sampling.ignore_eos = request.ignore_eos();
  out.stop_strings.assign(request.stop().begin(), request.stop().end());
  if (request.has_kv_window()) {
    const v1::KvWindow& window = request.kv_window();
    out.kv_window = KvWindow{};
    if (window.has_sink_tokens()) out.kv_window->sink_tokens = Saturated(window.sink_tokens());
    out.kv_window->window_tokens = Saturated(window.window_tokens());
  }
  if (!request.prediction().empty()) {
    // The client's text as text: drafts are only ever verified, never trusted.
    TM_ASSIGN_OR_RETURN(out.predicted_token_ids,
                        context.tokenizer->Encode(request.prediction(),
                                                  {.add_special = false, .parse_special = false}));
  }
  out.priority = request.priority();
  out.tenant = context.tenant;
  out.cache_salt =
      PrefixCacheSalt(context.tenant, request.cache_salt(), context.shared_prefix_cache);
  TM_ASSIGN_OR_RETURN(out.lora, LoraOf(request.model(), context));
  out.output_parsing = chat_parsing;

  const RequestLimits limits = context.limits();
  StatusOr<ValidatedRequest> validated = ValidatedRequest::Validate(std::move(out), limits);
  if (!validated.ok()) return InWireTerms(validated.status());
  ValidatedRequest valid = std::move(validated).value();
  // The wire's own promise (the engine would stop at the context instead): without a
  // kv_window the whole of max_tokens fits.
  if (!valid.get().kv_window && prompt_tokens + max_tokens > context.max_model_len) {
    return OutOfRangeError(
        "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus max_tokens (" +
        std::to_string(max_tokens) + ") exceeds this server's limit of " +
        std::to_string(context.max_model_len) + " tokens: lower max_tokens to at most " +
        std::to_string(context.max_model_len - prompt_tokens) +
        ", shorten the prompt or set kv_window to generate past the context");
  }
  if (!CompilesGrammar(request)) return valid;

  // Refused before anything is compiled; Constrain checks the compiled grammar.
  TM_RETURN_IF_ERROR(ValidateConstrainedSampling(valid.get().sampling));
  std::shared_ptr<const grammar::CompiledGrammar> compiled;
  if (request.sampling().structured_output_case() !=
      v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET) {
    TM_ASSIGN_OR_RETURN(compiled, CompileStructuredOutput(request.sampling(), context.grammars));
  } else {
    TM_ASSIGN_OR_RETURN(compiled, CompileForcedToolCall(request.chat(), context));
  }
  // Reasoning is free and the constraint starts after it: the reasoning the prompt opened,
  // or one the model opens itself (Qwen3's templates leave <think> to the model). Harmony
  // has no <think>: a forced call is the turn's first message.
  std::vector<TokenId> starts_after;
  std::vector<TokenId> reasoning_opens;
  if (chat_parsing && chat_parsing->reasoning && !chat_parsing->harmony) {
    TM_ASSIGN_OR_RETURN(starts_after, context.tokenizer->Encode(kThinkClose, kChatEncodeOptions));
    if (!chat_parsing->starts_in_reasoning) {
      TM_ASSIGN_OR_RETURN(reasoning_opens,
                          context.tokenizer->Encode(kThinkOpen, kChatEncodeOptions));
    }
  }
  TM_RETURN_IF_ERROR(valid.Constrain(std::move(compiled), std::move(starts_after),
                                     std::move(reasoning_opens), limits));
  return valid;
}

}  // namespace tokenmill::server
