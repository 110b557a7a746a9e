#include "gateway/api/anthropic/anthropic_messages.h"

#include <limits>
#include <map>
#include <set>
#include <string_view>

#include "gateway/api/json_fields.h"
#include "gateway/api/openai/tool_calls.h"
#include "gateway/http/request_body.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

// The fields a messages body and a count_tokens body share: what makes the prompt.
const std::set<std::string_view>& PromptParams() {
  static const std::set<std::string_view> kParams = {"model",  "messages",    "system",
                                                     "tools",  "tool_choice", "thinking"};
  return kParams;
}

// cache_control marks where Anthropic caches a prefix; tokenmill's prefix cache needs no mark.
std::optional<HttpError> CheckCacheControl(const json& block, const std::string& where) {
  const json* cache = Field(block, "cache_control");
  if (cache == nullptr || HasType(*cache, "ephemeral")) return std::nullopt;
  return BadRequest(where + ".cache_control must be {\"type\": \"ephemeral\"}");
}

std::optional<HttpError> RefuseOtherBlockKeys(const json& block, const std::string& where,
                                              const std::set<std::string_view>& known) {
  for (const auto& [key, value] : block.items()) {
    if (known.count(key) == 0 && !value.is_null()) {
      return BadRequest(where + "." + key + ": Extra inputs are not permitted");
    }
  }
  return std::nullopt;
}

// {"type": "text", "text": ...}: its text appended to `text`.
std::optional<HttpError> TextBlock(const json& block, const std::string& where,
                                   std::string& text) {
  GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(block, where, {"type", "text", "cache_control",
                                                         "citations"}));
  const json* value = Field(block, "text");
  if (value == nullptr || !value->is_string()) {
    return BadRequest(where + ".text: a text block needs a string `text`");
  }
  GW_RETURN_IF_ERROR(CheckCacheControl(block, where));
  text += value->get_ref<const std::string&>();
  return std::nullopt;
}

bool IsBlock(const json& block) {
  return block.is_object() && block.contains("type") && block["type"].is_string();
}

// A string, or a list of text blocks (concatenated, as the chat API's text parts are).
std::optional<HttpError> TextContent(const json& content, const std::string& where,
                                     std::string& text) {
  if (content.is_string()) {
    text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return BadRequest(where + ": must be a string or a list of content blocks");
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = where + "." + std::to_string(i);
    if (!IsBlock(block)) {
      return BadRequest(at + ": a content block is an object with a string `type`");
    }
    if (!HasType(block, "text")) {
      return BadRequest(at + ".type: '" + block["type"].get<std::string>() +
                        "' blocks are not supported here (only text)");
    }
    GW_RETURN_IF_ERROR(TextBlock(block, at, text));
  }
  return std::nullopt;
}

std::optional<HttpError> ParseSystem(const json& body, v1::Chat& chat) {
  const json* system = Field(body, "system");
  if (system == nullptr) return std::nullopt;
  std::string text;
  GW_RETURN_IF_ERROR(TextContent(*system, "system", text));
  v1::ChatMessage& message = *chat.add_messages();
  message.set_role("system");
  message.set_content(std::move(text));
  return std::nullopt;
}

// {"type": "tool_use", "id", "name", "input": {...}}: a call the assistant made.
std::optional<HttpError> ToolUseBlock(const json& block, const std::string& where,
                                      v1::ChatMessage& message,
                                      std::map<std::string, std::string>& names) {
  GW_RETURN_IF_ERROR(
      RefuseOtherBlockKeys(block, where, {"type", "id", "name", "input", "cache_control"}));
  const json* id = Field(block, "id");
  const json* name = Field(block, "name");
  const json* input = Field(block, "input");
  if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string()) {
    return BadRequest(where + ": a tool_use block needs a string id and name");
  }
  if (input == nullptr || !input->is_object()) {
    return BadRequest(where + ".input: must be an object (the call's arguments)");
  }
  v1::ToolCall& call = *message.add_tool_calls();
  call.set_id(CallIdOfToolUse(id->get<std::string>()));
  call.set_name(name->get<std::string>());
  call.set_arguments(input->dump());
  names[call.id()] = call.name();
  return std::nullopt;
}

// {"type": "tool_result", "tool_use_id", "content", "is_error"}: a tool message.
std::optional<HttpError> ToolResultBlock(const json& block, const std::string& where,
                                         const std::map<std::string, std::string>& names,
                                         v1::Chat& chat) {
  GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(
      block, where, {"type", "tool_use_id", "content", "is_error", "cache_control"}));
  const json* id = Field(block, "tool_use_id");
  if (id == nullptr || !id->is_string() || id->get_ref<const std::string&>().empty()) {
    return BadRequest(where + ".tool_use_id: the id of the tool_use block this answers");
  }
  std::optional<bool> is_error;
  GW_RETURN_IF_ERROR(Bool(block, "is_error", is_error));
  std::string text;
  if (const json* content = Field(block, "content")) {
    GW_RETURN_IF_ERROR(TextContent(*content, where + ".content", text));
  }
  v1::ChatMessage& message = *chat.add_messages();
  message.set_role("tool");
  message.set_tool_call_id(CallIdOfToolUse(id->get<std::string>()));
  if (const auto name = names.find(message.tool_call_id()); name != names.end()) {
    message.set_name(name->second);
  }
  // Templates have no error flag: the model reads it.
  message.set_content(is_error.value_or(false) ? "Error: " + text : text);
  return std::nullopt;
}

// A user message's blocks: its text, and a tool message per tool_result (in their order).
std::optional<HttpError> UserBlocks(const json& content, const std::string& where,
                                    const std::map<std::string, std::string>& names,
                                    v1::Chat& chat) {
  std::string text;
  bool has_text = false;
  const auto flush = [&] {
    if (!has_text) return;
    v1::ChatMessage& message = *chat.add_messages();
    message.set_role("user");
    message.set_content(std::move(text));
    text.clear();
    has_text = false;
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = where + "." + std::to_string(i);
    if (!IsBlock(block)) {
      return BadRequest(at + ": a content block is an object with a string `type`");
    }
    if (HasType(block, "text")) {
      GW_RETURN_IF_ERROR(TextBlock(block, at, text));
      has_text = true;
    } else if (HasType(block, "tool_result")) {
      flush();
      GW_RETURN_IF_ERROR(ToolResultBlock(block, at, names, chat));
    } else {
      return BadRequest(at + ".type: '" + block["type"].get<std::string>() +
                        "' blocks are not supported in user messages (only text and "
                        "tool_result)");
    }
  }
  flush();
  return std::nullopt;
}

// An assistant message's blocks: text, thinking (its reasoning) and tool_use.
std::optional<HttpError> AssistantBlocks(const json& content, const std::string& where,
                                         std::map<std::string, std::string>& names,
                                         v1::ChatMessage& message) {
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = where + "." + std::to_string(i);
    if (!IsBlock(block)) {
      return BadRequest(at + ": a content block is an object with a string `type`");
    }
    if (HasType(block, "text")) {
      GW_RETURN_IF_ERROR(TextBlock(block, at, *message.mutable_content()));
    } else if (HasType(block, "tool_use")) {
      GW_RETURN_IF_ERROR(ToolUseBlock(block, at, message, names));
    } else if (HasType(block, "thinking")) {
      GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(block, at, {"type", "thinking", "signature"}));
      const json* thinking = Field(block, "thinking");
      if (thinking == nullptr || !thinking->is_string()) {
        return BadRequest(at + ".thinking: a thinking block needs a string `thinking`");
      }
      message.mutable_reasoning()->append(thinking->get_ref<const std::string&>());
    } else {
      return BadRequest(at + ".type: '" + block["type"].get<std::string>() +
                        "' blocks are not supported in assistant messages (only text, "
                        "thinking and tool_use)");
    }
  }
  return std::nullopt;
}

std::optional<HttpError> ParseMessageList(const json& body, v1::Chat& chat) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return BadRequest("messages: must be a non-empty list of {role, content}", "messages");
  }
  std::map<std::string, std::string> names;  // tool_use id -> the function called
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages." + std::to_string(i);
    if (!m.is_object()) return BadRequest(where + ": must be an object {role, content}");
    GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(m, where, {"role", "content"}));
    const json* role = Field(m, "role");
    if (role == nullptr || (*role != "user" && *role != "assistant")) {
      return BadRequest(where + ".role: must be \"user\" or \"assistant\" (the system prompt "
                                "goes in the top-level `system`)");
    }
    const json* content = Field(m, "content");
    if (content == nullptr) return BadRequest(where + ".content: Field required");
    if (!content->is_string() && !content->is_array()) {
      return BadRequest(where + ".content: must be a string or a list of content blocks");
    }
    const bool user = *role == "user";
    if (content->is_array() && user) {
      GW_RETURN_IF_ERROR(UserBlocks(*content, where + ".content", names, chat));
      continue;
    }
    v1::ChatMessage& message = *chat.add_messages();
    message.set_role(role->get<std::string>());
    // "" for a turn of tool_use blocks alone, not null: templates that add content to a
    // string (SmolLM2's) fail on null.
    message.set_content("");
    if (content->is_string()) {
      message.set_content(content->get<std::string>());
    } else {
      GW_RETURN_IF_ERROR(AssistantBlocks(*content, where + ".content", names, message));
    }
  }
  // Anthropic continues a final assistant message (a prefill), refusing one that ends in
  // whitespace; the server refuses a template that cannot leave it open.
  const v1::ChatMessage& last = chat.messages(chat.messages_size() - 1);
  if (last.role() == "assistant") {
    const std::string& text = last.content();
    if (!text.empty() && std::string_view(" \t\r\n").find(text.back()) != std::string_view::npos) {
      return BadRequest("messages: final assistant content cannot end with trailing whitespace");
    }
    chat.set_continue_final_message(true);
  }
  return std::nullopt;
}

// Anthropic's tool_choice as chat completions' (auto, none, required, a named function).
std::optional<HttpError> ToolChoice(const json& body, json& openai) {
  const json* choice = Field(body, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  const std::string shape =
      "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}";
  if (!IsBlock(*choice)) return BadRequest(shape);
  const std::string type = (*choice)["type"].get<std::string>();
  GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(
      *choice, "tool_choice", {"type", "name", "disable_parallel_tool_use"}));
  std::optional<bool> serial;
  GW_RETURN_IF_ERROR(Bool(*choice, "disable_parallel_tool_use", serial));
  if (serial) openai["parallel_tool_calls"] = !*serial;
  if (type == "auto" || type == "none") {
    openai["tool_choice"] = type;
  } else if (type == "any") {
    openai["tool_choice"] = "required";
  } else if (type == "tool") {
    const json* name = Field(*choice, "name");
    if (name == nullptr || !name->is_string()) {
      return BadRequest("tool_choice.name: the tool to call, with {\"type\": \"tool\"}");
    }
    openai["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    return BadRequest(shape);
  }
  return std::nullopt;
}

// Anthropic's tools ({name, description, input_schema}) in OpenAI's shape, which the chat
// API's checks and the templates take. `tools` is a list of objects (checked first).
template <typename Json>
Json AnthropicToolsAsOpenAI(const Json& tools) {
  Json functions = Json::array();
  for (const Json& tool : tools) {
    Json function = Json::object();
    function["name"] = tool["name"];
    if (tool.contains("description")) function["description"] = tool["description"];
    function["parameters"] = tool["input_schema"];
    Json entry = Json::object();
    entry["type"] = "function";
    entry["function"] = std::move(function);
    functions.push_back(std::move(entry));
  }
  return functions;
}

std::optional<HttpError> ParseTools(const json& body, v1::Chat& chat) {
  json openai = json::object();
  GW_RETURN_IF_ERROR(ToolChoice(body, openai));
  if (const json* tools = Field(body, "tools")) {
    if (!tools->is_array()) return BadRequest("tools: must be a list of tool definitions");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string where = "tools." + std::to_string(i);
      if (!tool.is_object()) return BadRequest(where + ": must be an object");
      GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(
          tool, where, {"type", "name", "description", "input_schema", "cache_control"}));
      if (const json* type = Field(tool, "type"); type != nullptr && *type != "custom") {
        return BadRequest(where +
                          ".type: only custom tools (the client runs them) are supported");
      }
      const json* name = Field(tool, "name");
      if (name == nullptr || !name->is_string()) {
        return BadRequest(where + ".name: must be a string");
      }
      if (const json* description = Field(tool, "description");
          description != nullptr && !description->is_string()) {
        return BadRequest(where + ".description: must be a string");
      }
      const json* schema = Field(tool, "input_schema");
      if (schema == nullptr || !schema->is_object()) {
        return BadRequest(where + ".input_schema: must be a JSON Schema object");
      }
      GW_RETURN_IF_ERROR(CheckCacheControl(tool, where));
    }
    openai["tools"] = AnthropicToolsAsOpenAI(*tools);
  }
  return ParseToolParams(openai, chat);
}

// thinking: whether a reasoning model thinks first (the templates' enable_thinking).
std::optional<HttpError> ParseThinking(const json& body, v1::Chat& chat) {
  const json* thinking = Field(body, "thinking");
  if (thinking == nullptr) return std::nullopt;
  if (!HasType(*thinking, "enabled") && !HasType(*thinking, "adaptive") &&
      !HasType(*thinking, "disabled")) {
    return BadRequest("thinking: must be {\"type\": \"enabled\" | \"adaptive\" | \"disabled\"}");
  }
  GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(*thinking, "thinking", {"type", "budget_tokens"}));
  std::optional<int64_t> budget;
  GW_RETURN_IF_ERROR(Integer(*thinking, "budget_tokens", 1,
                             std::numeric_limits<uint32_t>::max(), budget));
  const json kwargs = {{"enable_thinking", !HasType(*thinking, "disabled")}};
  chat.set_template_kwargs_json(kwargs.dump());
  return std::nullopt;
}

std::optional<HttpError> ParsePrompt(const json& body, v1::Chat& chat) {
  GW_RETURN_IF_ERROR(ParseSystem(body, chat));
  GW_RETURN_IF_ERROR(ParseMessageList(body, chat));
  GW_RETURN_IF_ERROR(ParseTools(body, chat));
  return ParseThinking(body, chat);
}

std::optional<HttpError> ParseSampling(const json& body, MessagesRequest& out) {
  v1::SamplingParams& sampling = *out.generate.mutable_sampling();
  std::optional<double> number;
  GW_RETURN_IF_ERROR(Number(body, "temperature", number));
  if (number) sampling.set_temperature(static_cast<float>(*number));
  number.reset();
  GW_RETURN_IF_ERROR(Number(body, "top_p", number));
  if (number) sampling.set_top_p(static_cast<float>(*number));
  std::optional<int64_t> top_k;
  GW_RETURN_IF_ERROR(Integer(body, "top_k", 0, std::numeric_limits<int32_t>::max(), top_k));
  if (top_k) sampling.set_top_k(static_cast<int32_t>(*top_k));
  // Required here; its range (at least 1) is the server's to check.
  std::optional<int64_t> max_tokens;
  GW_RETURN_IF_ERROR(
      Integer(body, "max_tokens", 0, std::numeric_limits<uint32_t>::max(), max_tokens));
  if (!max_tokens) return BadRequest("max_tokens: Field required", "max_tokens");
  out.generate.set_max_tokens(static_cast<uint32_t>(*max_tokens));
  if (const json* stop = Field(body, "stop_sequences")) {
    if (!stop->is_array()) return BadRequest("stop_sequences: must be a list of strings");
    for (const json& s : *stop) {
      if (!s.is_string() || s.get_ref<const std::string&>().empty()) {
        return BadRequest("stop_sequences: must be a list of non-empty strings");
      }
      out.generate.add_stop(s.get<std::string>());
    }
  }
  return std::nullopt;
}

// output_config: {"format": {"type": "json_schema", "schema": {...}}}: structured output.
std::optional<HttpError> ParseOutputConfig(const json& body, MessagesRequest& out) {
  const json* config = Field(body, "output_config");
  if (config == nullptr) return std::nullopt;
  if (!config->is_object()) return BadRequest("output_config: must be an object {format}");
  GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(*config, "output_config", {"format"}));
  const json* format = Field(*config, "format");
  if (format == nullptr) return std::nullopt;
  if (!HasType(*format, "json_schema")) {
    return BadRequest("output_config.format: must be {\"type\": \"json_schema\", \"schema\": "
                      "{...}}");
  }
  GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(*format, "output_config.format", {"type", "schema"}));
  const json* schema = Field(*format, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return BadRequest("output_config.format.schema: must be a JSON Schema object");
  }
  out.generate.mutable_sampling()->set_json_schema(schema->dump());
  out.structured_output_param = "output_config.format";
  return std::nullopt;
}

std::optional<HttpError> ParseModel(const json& body, std::string& model) {
  std::optional<std::string> text;
  GW_RETURN_IF_ERROR(String(body, "model", text));
  model = text.value_or("");
  return std::nullopt;
}

}  // namespace

std::optional<HttpError> ParseMessagesRequest(const json& body, MessagesRequest& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  std::set<std::string_view> known = PromptParams();
  known.insert({"max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "stream",
                "metadata", "service_tier", "output_config", "cache_control", "speed"});
  GW_RETURN_IF_ERROR(RefuseUnknown(body, known));
  GW_RETURN_IF_ERROR(ParseModel(body, out.model));
  GW_RETURN_IF_ERROR(ParsePrompt(body, *out.generate.mutable_chat()));
  GW_RETURN_IF_ERROR(ParseSampling(body, out));
  GW_RETURN_IF_ERROR(ParseOutputConfig(body, out));
  GW_RETURN_IF_ERROR(RefuseTwoConstraints(out.generate.chat(), out.structured_output_param));
  GW_RETURN_IF_ERROR(CheckCacheControl(body, "request"));
  if (const json* speed = Field(body, "speed"); speed != nullptr && *speed != "standard") {
    return BadRequest("speed: only \"standard\" is served");
  }
  std::optional<bool> stream;
  GW_RETURN_IF_ERROR(Bool(body, "stream", stream));
  out.stream = stream.value_or(false);
  if (const json* metadata = Field(body, "metadata")) {
    if (!metadata->is_object()) return BadRequest("metadata: must be an object {user_id}");
    GW_RETURN_IF_ERROR(RefuseOtherBlockKeys(*metadata, "metadata", {"user_id"}));
    std::optional<std::string> user;
    GW_RETURN_IF_ERROR(String(*metadata, "user_id", user));
  }
  // Every request is served at the one tier there is.
  if (const json* tier = Field(body, "service_tier");
      tier != nullptr && *tier != "auto" && *tier != "standard_only") {
    return BadRequest("service_tier: must be \"auto\" or \"standard_only\"");
  }
  out.affinity_key = ChatAffinityKey(out.generate.chat());
  return std::nullopt;
}

void KeepAnthropicToolsOrder(std::string_view body, v1::Chat& chat) {
  if (chat.tools_json().empty()) return;
  nlohmann::ordered_json ordered;
  if (ParseRequestBody(body, ordered)) return;  // parsed once already: cannot fail
  chat.set_tools_json(AnthropicToolsAsOpenAI(ordered.at("tools")).dump());
}

std::optional<HttpError> ParseCountTokensRequest(const json& body, TokenizeCall& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  GW_RETURN_IF_ERROR(RefuseUnknown(body, PromptParams()));
  GW_RETURN_IF_ERROR(ParseModel(body, out.model));
  return ParsePrompt(body, *out.request.mutable_chat());
}

namespace {
constexpr std::string_view kToolUsePrefix = "toolu_";
constexpr std::string_view kCallPrefix = "call_";
constexpr size_t kMistralIdLetters = 9;
constexpr std::string_view kKimiIdPrefix = "functions.";
}  // namespace

std::string ToolUseId(std::string_view call_id) {
  if (call_id.starts_with(kCallPrefix)) call_id.remove_prefix(kCallPrefix.size());
  return std::string(kToolUsePrefix) + std::string(call_id);
}

std::string CallIdOfToolUse(std::string_view tool_use_id) {
  const std::string_view letters = tool_use_id.substr(std::min(tool_use_id.size(),
                                                               kToolUsePrefix.size()));
  if (tool_use_id.starts_with(kToolUsePrefix) &&
      (letters.size() == kMistralIdLetters || letters.starts_with(kKimiIdPrefix))) {
    return std::string(letters);
  }
  return std::string(tool_use_id);
}

StopReason AnthropicStopReason(v1::FinishReason finish, const std::string& stop_string) {
  if (finish == v1::FINISH_REASON_LENGTH) return {"max_tokens", std::nullopt};
  if (finish == v1::FINISH_REASON_TOOL_CALLS) return {"tool_use", std::nullopt};
  if (!stop_string.empty()) return {"stop_sequence", stop_string};
  return {"end_turn", std::nullopt};
}

json AnthropicUsage(const TokenUsage& usage) {
  return {{"input_tokens", usage.prompt_tokens - usage.cached_tokens},
          {"output_tokens", usage.completion_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", usage.cached_tokens}};
}

json MessageJson(const std::string& id, const std::string& model, const json& content,
                 const std::optional<StopReason>& stop, const TokenUsage& usage) {
  json message = {{"id", id},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model},
                  {"content", content},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", AnthropicUsage(usage)}};
  if (stop) {
    message["stop_reason"] = stop->reason;
    if (stop->stop_sequence) message["stop_sequence"] = *stop->stop_sequence;
  }
  return message;
}

AnthropicError ToAnthropicError(const HttpError& error) {
  AnthropicError out;
  out.status = error.status;
  std::string type = "api_error";
  switch (error.status) {
    case 400:
    case 405:
    case 422:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      // Anthropic's status for "overloaded: retry later".
      out.status = 529;
      type = "overloaded_error";
      break;
    case 504:
      type = "timeout_error";
      break;
    default:
      break;
  }
  out.body = {{"type", "error"}, {"error", {{"type", type}, {"message", error.message}}}};
  return out;
}

}  // namespace tokenmill::gateway
