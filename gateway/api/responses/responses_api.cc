#include "gateway/api/responses/responses_api.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <set>
#include <string_view>

#include "common/json_nesting.h"
#include "gateway/api/json_fields.h"
#include "gateway/api/openai/sdk_fields.h"
#include "gateway/api/openai/tool_calls.h"
#include "gateway/http/request_body.h"
#include "common/url_query.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

// (Not RefuseOtherKeys: structured_output.cc's, with its own message, may share a unity batch.)
std::optional<HttpError> RefuseUnsupportedKeys(const json& object, const std::string& where,
                                               const std::set<std::string_view>& known,
                                               const std::string& param) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0 && !value.is_null()) {
      return BadRequest(where + "." + key + " is not supported", param);
    }
  }
  return std::nullopt;
}

// A message's content: a string or a list of text parts (input_text, output_text; a refusal
// the client sends back is the assistant's text too).
std::optional<HttpError> MessageContent(const json& content, const std::string& where,
                                        std::string& text) {
  if (content.is_string()) {
    text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return BadRequest(where + " must be a string or a list of content parts", "input");
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const char* field = HasType(part, "refusal") ? "refusal" : "text";
    if (!HasType(part, "input_text") && !HasType(part, "output_text") &&
        !HasType(part, "refusal")) {
      return BadRequest(at + ": only input_text, output_text and refusal parts are supported",
                        "input");
    }
    const json* value = Field(part, field);
    if (value == nullptr || !value->is_string()) {
      return BadRequest(at + "." + field + " must be a string", "input");
    }
    text += value->get_ref<const std::string&>();
  }
  return std::nullopt;
}

std::optional<HttpError> MessageItem(const json& item, const std::string& where,
                                     std::vector<v1::ChatMessage>& out) {
  GW_RETURN_IF_ERROR(
      RefuseUnsupportedKeys(item, where, {"type", "role", "content", "id", "status"}, "input"));
  const json* role = Field(item, "role");
  if (role == nullptr || !role->is_string()) {
    return BadRequest(where + ".role must be user, assistant, system or developer", "input");
  }
  std::string name = role->get<std::string>();
  if (name == "developer") name = "system";
  if (name != "user" && name != "assistant" && name != "system") {
    return BadRequest(where + ".role '" + name +
                          "' is not one of user, assistant, system, developer",
                      "input");
  }
  const json* content = Field(item, "content");
  if (content == nullptr) return BadRequest(where + ".content is required", "input");
  v1::ChatMessage& message = out.emplace_back();
  message.set_role(name);
  return MessageContent(*content, where + ".content", *message.mutable_content());
}

// A function_call item: a call of the assistant's turn (the message before it, when that is
// the assistant's).
std::optional<HttpError> FunctionCallItem(const json& item, const std::string& where,
                                          std::vector<v1::ChatMessage>& out,
                                          std::string& reasoning) {
  GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(
      item, where, {"type", "call_id", "name", "arguments", "id", "status"}, "input"));
  const json* call_id = Field(item, "call_id");
  const json* name = Field(item, "name");
  const json* arguments = Field(item, "arguments");
  if (call_id == nullptr || !call_id->is_string() || name == nullptr || !name->is_string() ||
      arguments == nullptr || !arguments->is_string()) {
    return BadRequest(where + ": a function_call needs string call_id, name and arguments",
                      "input");
  }
  // The templates print the arguments as an object: they must be one, and no deeper than any
  // other JSON a client sends (the server copies and prints it recursively).
  if (JsonTextNestsDeeperThan(arguments->get_ref<const std::string&>())) {
    return BadRequest(JsonNestingRefusal(where + ".arguments"), "input");
  }
  if (!json::parse(arguments->get<std::string>(), nullptr, false).is_object()) {
    return BadRequest(where + ".arguments must be a JSON object, as a string", "input");
  }
  if (out.empty() || out.back().role() != "assistant") {
    v1::ChatMessage& turn = out.emplace_back();
    turn.set_role("assistant");
    // "", not null: templates that add content to a string (SmolLM2's) fail on null.
    turn.set_content("");
  }
  v1::ChatMessage& message = out.back();
  message.mutable_reasoning()->append(reasoning);
  reasoning.clear();
  v1::ToolCall& call = *message.add_tool_calls();
  call.set_id(call_id->get<std::string>());
  call.set_name(name->get<std::string>());
  call.set_arguments(arguments->get<std::string>());
  return std::nullopt;
}

// A function_call_output item: a tool message answering the call with that call_id.
std::optional<HttpError> FunctionCallOutputItem(const json& item, const std::string& where,
                                                std::vector<v1::ChatMessage>& out) {
  GW_RETURN_IF_ERROR(
      RefuseUnsupportedKeys(item, where, {"type", "call_id", "output", "id", "status"}, "input"));
  const json* call_id = Field(item, "call_id");
  const json* output = Field(item, "output");
  if (call_id == nullptr || !call_id->is_string() ||
      call_id->get_ref<const std::string&>().empty()) {
    return BadRequest(where + ".call_id: the call_id of the function_call this answers",
                      "input");
  }
  if (output == nullptr) return BadRequest(where + ".output is required", "input");
  v1::ChatMessage& message = out.emplace_back();
  message.set_role("tool");
  message.set_tool_call_id(call_id->get<std::string>());
  // The function's name, from the call it answers.
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    for (const v1::ToolCall& call : it->tool_calls()) {
      if (call.id() == message.tool_call_id()) message.set_name(call.name());
    }
  }
  return MessageContent(*output, where + ".output", *message.mutable_content());
}

// A reasoning item the client sends back: the reasoning of the assistant turn that follows.
std::optional<HttpError> ReasoningItem(const json& item, const std::string& where,
                                       std::string& reasoning) {
  GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(
      item, where, {"type", "id", "summary", "content", "encrypted_content", "status"}, "input"));
  if (Field(item, "encrypted_content") != nullptr) {
    return BadRequest(where + ".encrypted_content: tokenmill returns its reasoning as text, "
                              "never encrypted",
                      "input");
  }
  for (const char* key : {"content", "summary"}) {
    const json* parts = Field(item, key);
    if (parts == nullptr) continue;
    if (!parts->is_array()) return BadRequest(where + "." + key + " must be a list", "input");
    const char* type = std::string_view(key) == "content" ? "reasoning_text" : "summary_text";
    for (const json& part : *parts) {
      const json* text = Field(part, "text");
      if (!HasType(part, type) || text == nullptr || !text->is_string()) {
        return BadRequest(where + "." + key + ": parts are {\"type\": \"" + type +
                              "\", \"text\": ...}",
                          "input");
      }
      // The content is the reasoning itself; a summary stands in for it without one.
      if (std::string_view(key) == "content" || Field(item, "content") == nullptr) {
        reasoning += text->get_ref<const std::string&>();
      }
    }
  }
  return std::nullopt;
}

std::optional<HttpError> ParseInput(const json& body, std::vector<v1::ChatMessage>& out) {
  const json* input = Field(body, "input");
  if (input == nullptr) return BadRequest("input is required", "input");
  if (input->is_string()) {
    v1::ChatMessage& message = out.emplace_back();
    message.set_role("user");
    message.set_content(input->get<std::string>());
    return std::nullopt;
  }
  if (!input->is_array() || input->empty()) {
    return BadRequest("input must be a string or a non-empty list of items", "input");
  }
  std::string reasoning;  // of the assistant turn that follows
  for (size_t i = 0; i < input->size(); ++i) {
    const json& item = (*input)[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return BadRequest(where + " must be an object", "input");
    // Easy input messages carry no type. A null one is refused, as vLLM does, not taken for
    // none: InputItemsJson lists the items as sent.
    const auto type = item.find("type");
    if (type != item.end() && !type->is_string()) {
      return BadRequest(where + ".type must be a string", "input");
    }
    const std::string kind = type == item.end() ? "message" : type->get<std::string>();
    if (kind == "message") {
      GW_RETURN_IF_ERROR(MessageItem(item, where, out));
      if (out.back().role() == "assistant") {
        out.back().set_reasoning(reasoning);
        reasoning.clear();
      }
    } else if (kind == "function_call") {
      GW_RETURN_IF_ERROR(FunctionCallItem(item, where, out, reasoning));
    } else if (kind == "function_call_output") {
      GW_RETURN_IF_ERROR(FunctionCallOutputItem(item, where, out));
    } else if (kind == "reasoning") {
      GW_RETURN_IF_ERROR(ReasoningItem(item, where, reasoning));
    } else {
      return BadRequest(where + ".type '" + kind +
                            "' is not supported (message, function_call, "
                            "function_call_output and reasoning items only)",
                        "input");
    }
  }
  return std::nullopt;
}

// Function tools in chat-completions' shape ({type, function: {name, description, parameters,
// strict}}), which the chat API's checks and the templates take. `tools` is a list of
// objects (checked first).
template <typename Json>
Json ResponsesToolsAsOpenAI(const Json& tools) {
  Json functions = Json::array();
  for (const Json& tool : tools) {
    Json function = Json::object();
    for (const char* key : {"name", "description", "parameters", "strict"}) {
      if (tool.contains(key) && !tool[key].is_null()) function[key] = tool[key];
    }
    Json entry = Json::object();
    entry["type"] = "function";
    entry["function"] = std::move(function);
    functions.push_back(std::move(entry));
  }
  return functions;
}

std::optional<HttpError> ParseTools(const json& body, ResponsesRequest& out) {
  json openai = json::object();
  if (const json* choice = Field(body, "tool_choice")) {
    if (choice->is_string()) {
      openai["tool_choice"] = *choice;
    } else if (HasType(*choice, "function") && Field(*choice, "name") != nullptr) {
      GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(*choice, "tool_choice", {"type", "name"},
                                               "tool_choice"));
      openai["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
    } else {
      return BadRequest("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": "
                        "\"function\", \"name\": ...}",
                        "tool_choice");
    }
  }
  if (const json* parallel = Field(body, "parallel_tool_calls")) {
    openai["parallel_tool_calls"] = *parallel;
  }
  if (const json* tools = Field(body, "tools")) {
    if (!tools->is_array()) return BadRequest("tools must be a list of function tools", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!HasType(tool, "function")) {
        return BadRequest(where + ": only {\"type\": \"function\"} tools are supported",
                          "tools");
      }
      GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(
          tool, where, {"type", "name", "description", "parameters", "strict"}, "tools"));
    }
    openai["tools"] = ResponsesToolsAsOpenAI(*tools);
  }
  return ParseToolParams(openai, out.tools);
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", ...}, "verbosity"}.
std::optional<HttpError> ParseText(const json& body, ResponsesRequest& out) {
  const json* text = Field(body, "text");
  if (text == nullptr) return std::nullopt;
  const std::string param = "text";
  if (!text->is_object()) return BadRequest("text must be an object {format}", param);
  GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(*text, "text", {"format", "verbosity"}, param));
  // As chat completions' verbosity: checked, then accepted and ignored (logged once).
  if (const json* verbosity = Field(*text, "verbosity")) {
    if (!verbosity->is_string()) return BadRequest("text.verbosity must be a string", param);
    const std::string& value = verbosity->get_ref<const std::string&>();
    if (value != "low" && value != "medium" && value != "high") {
      return BadRequest("text.verbosity '" + value + "' is not one of low, medium, high", param);
    }
    out.ignored_fields.push_back(IgnoredField{"text.verbosity", kVerbosityIgnoredWhy});
  }
  const json* format = Field(*text, "format");
  if (format == nullptr) return std::nullopt;
  const auto type = format->is_object() ? format->find("type") : format->end();
  if (type == format->end() || !type->is_string()) {
    return BadRequest("text.format must be {\"type\": \"text\" | \"json_object\" | "
                      "\"json_schema\", ...}",
                      param);
  }
  v1::SamplingParams& sampling = *out.generate.mutable_sampling();
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text" || name == "json_object") {
    GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(*format, "text.format", {"type"}, param));
    if (name == "json_object") {
      sampling.mutable_json_object();
      out.structured_output_param = "text.format";
    }
    return std::nullopt;
  }
  if (name != "json_schema") {
    return BadRequest("text.format.type '" + name +
                          "' is not supported: use text, json_object or json_schema",
                      param);
  }
  GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(
      *format, "text.format", {"type", "name", "schema", "description", "strict"}, param));
  for (const char* key : {"name", "description"}) {
    if (const json* v = Field(*format, key); v != nullptr && !v->is_string()) {
      return BadRequest(std::string("text.format.") + key + " must be a string", param);
    }
  }
  // strict: true or false, the schema is enforced either way.
  if (const json* strict = Field(*format, "strict"); strict != nullptr && !strict->is_boolean()) {
    return BadRequest("text.format.strict must be true or false", param);
  }
  const json* schema = Field(*format, "schema");
  if (schema == nullptr || (!schema->is_object() && !schema->is_boolean())) {
    return BadRequest("text.format.schema must be a JSON Schema object", param);
  }
  sampling.set_json_schema(schema->dump());
  out.structured_output_param = "text.format";
  return std::nullopt;
}

std::optional<HttpError> ParseSampling(const json& body, ResponsesRequest& out) {
  v1::SamplingParams& sampling = *out.generate.mutable_sampling();
  std::optional<double> number;
  GW_RETURN_IF_ERROR(Number(body, "temperature", number));
  if (number) sampling.set_temperature(static_cast<float>(*number));
  number.reset();
  GW_RETURN_IF_ERROR(Number(body, "top_p", number));
  if (number) sampling.set_top_p(static_cast<float>(*number));
  std::optional<int64_t> max_tokens;
  GW_RETURN_IF_ERROR(Integer(body, "max_output_tokens", 1, std::numeric_limits<uint32_t>::max(),
                             max_tokens));
  if (max_tokens) out.generate.set_max_tokens(static_cast<uint32_t>(*max_tokens));
  return std::nullopt;
}

// Fields accepted with the one value tokenmill serves (anything else is a 400 naming them).
std::optional<HttpError> ParseFixedSettings(const json& body) {
  if (const json* truncation = Field(body, "truncation");
      truncation != nullptr && *truncation != "disabled") {
    return BadRequest("truncation: only \"disabled\" is supported (a prompt over the context "
                      "is refused)",
                      "truncation");
  }
  if (const json* background = Field(body, "background");
      background != nullptr && *background != false) {
    return BadRequest("background responses are not supported", "background");
  }
  if (const json* include = Field(body, "include");
      include != nullptr && (!include->is_array() || !include->empty())) {
    return BadRequest("include: no additional output data is supported", "include");
  }
  if (const json* tier = Field(body, "service_tier");
      tier != nullptr && *tier != "auto" && *tier != "default") {
    return BadRequest("service_tier must be \"auto\" or \"default\"", "service_tier");
  }
  if (const json* reasoning = Field(body, "reasoning");
      reasoning != nullptr && !(reasoning->is_object() && reasoning->empty())) {
    return BadRequest("reasoning settings are not supported", "reasoning");
  }
  if (const json* options = Field(body, "stream_options")) {
    // Obfuscation pads deltas against length side channels of remote services.
    if (!options->is_object()) return BadRequest("stream_options must be an object",
                                                 "stream_options");
    GW_RETURN_IF_ERROR(RefuseUnsupportedKeys(*options, "stream_options",
                                             {"include_obfuscation"}, "stream_options"));
  }
  if (const json* metadata = Field(body, "metadata")) {
    if (!metadata->is_object()) return BadRequest("metadata must be an object", "metadata");
    for (const auto& [key, value] : metadata->items()) {
      if (!value.is_string()) {
        return BadRequest("metadata." + key + " must be a string", "metadata");
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<HttpError> ParseResponsesRequest(const json& body, ResponsesRequest& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  GW_RETURN_IF_ERROR(RefuseUnknown(
      body, {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
             "stream", "stream_options", "store", "previous_response_id", "tools",
             "tool_choice", "parallel_tool_calls", "text", "metadata", "user", "truncation",
             "background", "include", "service_tier", "reasoning", "prompt_cache_key",
             "safety_identifier"}));
  std::optional<std::string> text;
  GW_RETURN_IF_ERROR(String(body, "model", text));
  out.model = text.value_or("");
  text.reset();
  GW_RETURN_IF_ERROR(String(body, "instructions", text));
  out.instructions = text;
  text.reset();
  GW_RETURN_IF_ERROR(String(body, "previous_response_id", text));
  out.previous_response_id = text.value_or("");
  text.reset();
  GW_RETURN_IF_ERROR(String(body, "prompt_cache_key", text));
  out.affinity_key = text ? "cache_key:" + *text : "";
  for (const char* name : {"user", "safety_identifier"}) {
    text.reset();
    GW_RETURN_IF_ERROR(String(body, name, text));
  }
  std::optional<bool> flag;
  GW_RETURN_IF_ERROR(Bool(body, "stream", flag));
  out.stream = flag.value_or(false);
  if (!out.stream && Field(body, "stream_options") != nullptr) {
    return BadRequest("stream_options is only allowed with stream: true", "stream_options");
  }
  flag.reset();
  GW_RETURN_IF_ERROR(Bool(body, "store", flag));
  out.store = flag.value_or(true);
  GW_RETURN_IF_ERROR(ParseFixedSettings(body));
  GW_RETURN_IF_ERROR(ParseSampling(body, out));
  GW_RETURN_IF_ERROR(ParseText(body, out));
  GW_RETURN_IF_ERROR(ParseTools(body, out));
  GW_RETURN_IF_ERROR(ParseInput(body, out.input));
  out.raw_input = *Field(body, "input");
  GW_RETURN_IF_ERROR(RefuseTwoConstraints(out.tools, out.structured_output_param));

  const auto echo = [&](const char* name, json fallback) {
    const json* value = Field(body, name);
    out.echo[name] = value ? *value : std::move(fallback);
  };
  echo("instructions", nullptr);
  echo("max_output_tokens", nullptr);
  echo("temperature", nullptr);  // unset: greedy, as the server decodes it
  echo("top_p", nullptr);
  echo("tools", json::array());
  echo("tool_choice", "auto");
  echo("parallel_tool_calls", true);
  echo("text", {{"format", {{"type", "text"}}}});
  echo("metadata", json::object());
  echo("previous_response_id", nullptr);
  echo("truncation", "disabled");
  echo("user", nullptr);
  echo("reasoning", {{"effort", nullptr}, {"summary", nullptr}});
  echo("service_tier", "default");
  out.echo["store"] = out.store;
  out.echo["background"] = false;
  return std::nullopt;
}

void BuildResponsesChat(const ResponsesRequest& request,
                        const std::vector<v1::ChatMessage>& previous, v1::Chat& chat) {
  if (request.instructions) {
    v1::ChatMessage& system = *chat.add_messages();
    system.set_role("system");
    system.set_content(*request.instructions);
  }
  for (const v1::ChatMessage& message : previous) *chat.add_messages() = message;
  for (const v1::ChatMessage& message : request.input) *chat.add_messages() = message;
  chat.MergeFrom(request.tools);
}

HttpError PreviousResponseNotFound(const std::string& id, int ttl_seconds) {
  HttpError error = NotFound(
      "Previous response with id '" + id +
          "' not found: it was not stored (store: false), is over " +
          std::to_string(ttl_seconds) +
          " s old, or was dropped for room; the gateway keeps stored responses in memory only",
      "previous_response_not_found");
  error.param = "previous_response_id";
  return error;
}

void KeepResponsesToolsOrder(std::string_view body, v1::Chat& chat) {
  if (chat.tools_json().empty()) return;
  nlohmann::ordered_json ordered;
  if (ParseRequestBody(body, ordered)) return;  // parsed once already: cannot fail
  chat.set_tools_json(ResponsesToolsAsOpenAI(ordered.at("tools")).dump());
}

const char* ItemIdPrefix(const TurnBlock& block) {
  switch (block.kind) {
    case TurnBlock::Kind::kReasoning:
      return "rs";
    case TurnBlock::Kind::kText:
      return "msg";
    case TurnBlock::Kind::kToolCall:
      return "fc";
  }
  return "item";
}

json ContentPartJson(TurnBlock::Kind kind, const std::string& text) {
  if (kind == TurnBlock::Kind::kReasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()},
          {"logprobs", json::array()}};
}

json OutputItemJson(const TurnBlock& block, const std::string& id, const std::string& status,
                    bool empty) {
  const std::string text = empty ? "" : block.text;
  switch (block.kind) {
    case TurnBlock::Kind::kReasoning:
      return {{"id", id},
              {"type", "reasoning"},
              {"status", status},
              {"summary", json::array()},
              {"content", empty ? json::array()
                                : json::array({ContentPartJson(block.kind, text)})}};
    case TurnBlock::Kind::kText:
      return {{"id", id},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", empty ? json::array()
                                : json::array({ContentPartJson(block.kind, text)})}};
    case TurnBlock::Kind::kToolCall:
      return {{"id", id},          {"type", "function_call"},   {"status", status},
              {"call_id", block.call_id}, {"name", block.call_name}, {"arguments", text}};
  }
  return nullptr;
}

json ResponseJson(const ResponsesRequest& request, const ResponseState& state) {
  json response = request.echo;
  response["id"] = state.id;
  response["object"] = "response";
  response["created_at"] = state.created_at;
  response["status"] = state.status;
  response["model"] = state.model;
  response["output"] = state.output;
  response["error"] = nullptr;
  response["incomplete_details"] = nullptr;
  response["usage"] = nullptr;
  if (!state.incomplete_reason.empty()) {
    response["incomplete_details"] = {{"reason", state.incomplete_reason}};
  }
  if (state.error) {
    response["error"] = {{"code", state.error->code.empty() ? "server_error" : state.error->code},
                         {"message", state.error->message}};
  }
  if (state.usage) {
    const ResponseUsage& u = *state.usage;
    response["usage"] = {{"input_tokens", u.input_tokens},
                         {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                         {"output_tokens", u.output_tokens},
                         {"output_tokens_details", {{"reasoning_tokens", 0}}},
                         {"total_tokens", u.input_tokens + u.output_tokens}};
  }
  return response;
}


json InputItemsJson(const json& raw_input,
                    const std::function<std::string(std::string_view)>& new_id) {
  json items = json::array();
  if (raw_input.is_string()) {
    items.push_back({{"type", "message"},
                     {"id", new_id("msg")},
                     {"role", "user"},
                     {"content", json::array({{{"type", "input_text"}, {"text", raw_input}}})},
                     {"status", "completed"}});
    return items;
  }
  for (json item : raw_input) {
    // ParseInput refused a type that is not a string; json::value would throw on one.
    const auto given = item.find("type");
    const std::string type = given != item.end() && given->is_string()
                                 ? given->get<std::string>()
                                 : std::string("message");
    item["type"] = type;
    const char* prefix = type == "message"                ? "msg"
                         : type == "function_call"        ? "fc"
                         : type == "function_call_output" ? "fco"
                                                          : "rs";
    if (!item.contains("id") || !item["id"].is_string()) item["id"] = new_id(prefix);
    if (!item.contains("status")) item["status"] = "completed";
    if (type == "message" && item["content"].is_string()) {
      const char* part = item["role"] == "assistant" ? "output_text" : "input_text";
      item["content"] = json::array({{{"type", part}, {"text", item["content"]}}});
    }
    items.push_back(std::move(item));
  }
  return items;
}

std::optional<HttpError> ParseInputItemsQuery(std::string_view query, InputItemsQuery& out) {
  for (const auto& [key, value] : QueryPairs(query)) {
    if (key == "order") {
      if (value != "asc" && value != "desc") {
        return BadRequest("order must be asc or desc, not '" + value + "'", "order");
      }
      out.order = value;
    } else if (key == "after") {
      out.after = value;
    } else if (key == "limit") {
      int limit = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), limit);
      if (error != std::errc() || end != value.data() + value.size() || limit < 1 ||
          limit > 100) {
        return BadRequest("limit must be an integer from 1 to 100, not '" + value + "'", "limit");
      }
      out.limit = limit;
    } else if (key != "include" && key != "include[]") {
      // include asks for extra fields of items this gateway does not have; anything else is
      // a mistake worth naming.
      return BadRequest("unknown query parameter '" + key +
                            "' (after, limit, order and include are accepted)",
                        key);
    }
  }
  return std::nullopt;
}

json InputItemsPage(const json& items, const InputItemsQuery& query) {
  std::vector<const json*> ordered;
  for (const json& item : items) ordered.push_back(&item);
  if (query.order == "desc") std::reverse(ordered.begin(), ordered.end());
  size_t start = 0;
  if (!query.after.empty()) {
    while (start < ordered.size() && (*ordered[start])["id"] != query.after) ++start;
    start = std::min(ordered.size(), start + 1);  // an unknown id: an empty page
  }
  const size_t end = std::min(ordered.size(), start + static_cast<size_t>(query.limit));
  json data = json::array();
  for (size_t i = start; i < end; ++i) data.push_back(*ordered[i]);
  json page = {{"object", "list"}, {"data", data}, {"has_more", end < ordered.size()}};
  page["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
  page["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
  return page;
}

}  // namespace tokenmill::gateway
