#include "gateway/api/openai/tool_calls.h"

#include <algorithm>

#include "common/json_nesting.h"
#include "gateway/api/json_fields.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

constexpr size_t kMaxFunctionNameBytes = 64;

// OpenAI's rule for function names: letters, digits, '_' and '-', at most 64.
bool IsFunctionName(const std::string& name) {
  return !name.empty() && name.size() <= kMaxFunctionNameBytes &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
         });
}

const std::string* StringField(const json& object, const char* name) {
  const json* v = Field(object, name);
  return v != nullptr && v->is_string() ? &v->get_ref<const std::string&>() : nullptr;
}

std::optional<HttpError> CheckTool(const json& tool, size_t i, std::set<std::string>& names) {
  const std::string where = "tools[" + std::to_string(i) + "]";
  const std::string shape = ": give {\"type\": \"function\", \"function\": {\"name\", "
                            "\"description\", \"parameters\"}}";
  if (!tool.is_object()) return BadRequest(where + " must be an object" + shape, "tools");
  const std::string* type = StringField(tool, "type");
  if (type == nullptr || *type != "function") {
    return BadRequest(where + ".type must be \"function\" (the only tool type served)", "tools");
  }
  for (const auto& [key, value] : tool.items()) {
    if (key != "type" && key != "function") {
      return BadRequest(where + "." + key + " is not a tool field" + shape, "tools");
    }
  }
  const json* function = Field(tool, "function");
  if (function == nullptr || !function->is_object()) {
    return BadRequest(where + ".function must be an object" + shape, "tools");
  }
  for (const auto& [key, value] : function->items()) {
    if (key != "name" && key != "description" && key != "parameters" && key != "strict") {
      return BadRequest(where + ".function." + key + " is not a function field" + shape, "tools");
    }
  }
  const std::string* name = StringField(*function, "name");
  if (name == nullptr || !IsFunctionName(*name)) {
    return BadRequest(where + ".function.name must be 1 to 64 letters, digits, '_' or '-'",
                      "tools");
  }
  if (!names.insert(*name).second) {
    return BadRequest(where + ".function.name '" + *name + "' is given twice", "tools");
  }
  if (const json* d = Field(*function, "description"); d != nullptr && !d->is_string()) {
    return BadRequest(where + ".function.description must be a string", "tools");
  }
  if (const json* p = Field(*function, "parameters"); p != nullptr && !p->is_object()) {
    return BadRequest(where + ".function.parameters must be a JSON Schema object", "tools");
  }
  if (const json* s = Field(*function, "strict"); s != nullptr && !s->is_boolean()) {
    return BadRequest(where + ".function.strict must be true or false", "tools");
  }
  return std::nullopt;
}

std::optional<HttpError> ParseToolChoice(const json& choice, const std::set<std::string>& names,
                                         v1::Chat& chat) {
  const std::string shape = "tool_choice must be \"none\", \"auto\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}";
  v1::ToolChoice& out = *chat.mutable_tool_choice();
  if (choice.is_string()) {
    const std::string& mode = choice.get_ref<const std::string&>();
    if (mode == "auto") {
      out.set_mode(v1::TOOL_CHOICE_MODE_AUTO);
    } else if (mode == "none") {
      out.set_mode(v1::TOOL_CHOICE_MODE_NONE);
    } else if (mode == "required") {
      if (names.empty()) return BadRequest("tool_choice \"required\" needs tools", "tool_choice");
      out.set_mode(v1::TOOL_CHOICE_MODE_REQUIRED);
    } else {
      return BadRequest(shape, "tool_choice");
    }
    return std::nullopt;
  }
  const std::string* type = choice.is_object() ? StringField(choice, "type") : nullptr;
  const json* function = type != nullptr ? Field(choice, "function") : nullptr;
  const std::string* name =
      function != nullptr && function->is_object() ? StringField(*function, "name") : nullptr;
  if (type == nullptr || *type != "function" || name == nullptr) {
    return BadRequest(shape, "tool_choice");
  }
  if (!names.contains(*name)) {
    return BadRequest("tool_choice names the function '" + *name + "', which is not in tools",
                      "tool_choice");
  }
  out.set_function_name(*name);
  return std::nullopt;
}

}  // namespace

void AppendToolCallDeltas(const v1::GenerateResponse& response, std::vector<v1::ToolCall>& calls) {
  for (const v1::ToolCallDelta& delta : response.tool_calls()) {
    if (delta.index() >= calls.size()) {
      calls.resize(delta.index() + 1);
      calls.back().set_id(delta.id());
      calls.back().set_name(delta.name());
    }
    calls[delta.index()].mutable_arguments()->append(delta.arguments());
  }
}

void AssistantTurn::Add(const v1::GenerateResponse& response) {
  content += response.text();
  reasoning += response.reasoning_text();
  AppendToolCallDeltas(response, tool_calls);
}

json ChatMessageJson(const std::string& content, const std::string& reasoning,
                     const std::vector<v1::ToolCall>& calls) {
  json message = {{"role", "assistant"},
                  {"content", calls.empty() || !content.empty() ? json(content) : json(nullptr)},
                  {"refusal", nullptr}};
  if (!reasoning.empty()) {
    message["reasoning_content"] = reasoning;
    message["reasoning"] = reasoning;
  }
  if (!calls.empty()) message["tool_calls"] = ToolCallsJson(calls);
  return message;
}

void AddParsedDelta(const v1::GenerateResponse& response, json& chunk) {
  json& delta = chunk["choices"][0]["delta"];
  if (!response.reasoning_text().empty()) {
    delta["reasoning_content"] = response.reasoning_text();
    delta["reasoning"] = response.reasoning_text();
  }
  if (json calls = ToolCallDeltasJson(response); !calls.is_null()) {
    delta["tool_calls"] = std::move(calls);
  }
}

const std::set<std::string_view>& ToolParams() {
  static const std::set<std::string_view> kParams = {"tools", "tool_choice",
                                                     "parallel_tool_calls",
                                                     "chat_template_kwargs"};
  return kParams;
}

std::optional<HttpError> ParseToolParams(const json& body, v1::Chat& chat) {
  std::set<std::string> names;
  const json* tools = Field(body, "tools");
  if (tools != nullptr) {
    if (!tools->is_array()) return BadRequest("tools must be a list of tool definitions", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      if (std::optional<HttpError> error = CheckTool((*tools)[i], i, names)) return error;
    }
  }
  if (const json* choice = Field(body, "tool_choice")) {
    if (std::optional<HttpError> error = ParseToolChoice(*choice, names, chat)) return error;
  }
  if (const json* parallel = Field(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) {
      return BadRequest("parallel_tool_calls must be true or false", "parallel_tool_calls");
    }
    chat.set_parallel_tool_calls(parallel->get<bool>());
  }
  // "none": the model may not call tools, so the template does not offer them.
  const bool offered = chat.tool_choice().mode() != v1::TOOL_CHOICE_MODE_NONE ||
                       chat.tool_choice().has_function_name();
  if (tools != nullptr && !tools->empty() && offered) chat.set_tools_json(tools->dump());
  if (const json* kwargs = Field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      return BadRequest("chat_template_kwargs must be an object of template variables",
                        "chat_template_kwargs");
    }
    for (const char* reserved : {"messages", "tools", "add_generation_prompt"}) {
      if (kwargs->contains(reserved)) {
        return BadRequest(std::string("chat_template_kwargs.") + reserved +
                              " would replace the request's own: set it with its own field",
                          "chat_template_kwargs");
      }
    }
    chat.set_template_kwargs_json(kwargs->dump());
  }
  return std::nullopt;
}

void KeepToolsOrder(const nlohmann::ordered_json& body, v1::Chat& chat) {
  if (chat.tools_json().empty()) return;
  if (const auto tools = body.find("tools"); tools != body.end()) {
    chat.set_tools_json(tools->dump());
  }
}

std::optional<HttpError> RefuseTwoConstraints(const v1::Chat& chat,
                                              const std::string& structured_output_param) {
  const bool forced = chat.tool_choice().has_function_name() ||
                      chat.tool_choice().mode() == v1::TOOL_CHOICE_MODE_REQUIRED;
  if (!forced || structured_output_param.empty()) return std::nullopt;
  return BadRequest("tool_choice forces a tool call, which " + structured_output_param +
                        " would constrain too: give one of them",
                    "tool_choice");
}

bool IsToolMessageKey(std::string_view key) {
  return key == "tool_calls" || key == "tool_call_id" || key == "name" ||
         key == "reasoning_content" || key == "reasoning";
}

std::optional<HttpError> ParseMessageToolFields(const json& message, size_t index,
                                                const std::string& role, v1::ChatMessage& out) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  const auto refuse_unless = [&](const char* key, bool allowed) -> std::optional<HttpError> {
    if (allowed || Field(message, key) == nullptr) return std::nullopt;
    return BadRequest(where + "." + key + " is only allowed in " +
                          (std::string_view(key) == "tool_call_id" ? "tool" : "assistant") +
                          " messages",
                      "messages");
  };
  const bool assistant = role == "assistant";
  for (const char* key : {"tool_calls", "reasoning_content", "reasoning"}) {
    if (std::optional<HttpError> e = refuse_unless(key, assistant)) return e;
  }
  if (std::optional<HttpError> e = refuse_unless("tool_call_id", role == "tool")) return e;
  if (const json* name = Field(message, "name")) {
    if (!name->is_string()) return BadRequest(where + ".name must be a string", "messages");
    out.set_name(name->get<std::string>());
  }
  for (const char* key : {"reasoning_content", "reasoning"}) {
    if (const json* reasoning = Field(message, key)) {
      if (!reasoning->is_string()) {
        return BadRequest(where + "." + key + " must be a string", "messages");
      }
      out.set_reasoning(reasoning->get<std::string>());
    }
  }
  if (role == "tool") {
    const std::string* id = StringField(message, "tool_call_id");
    if (id == nullptr || id->empty()) {
      return BadRequest(where + ".tool_call_id is required: the id of the call this answers",
                        "messages");
    }
    out.set_tool_call_id(*id);
  }
  const json* calls = Field(message, "tool_calls");
  if (calls == nullptr) return std::nullopt;
  const std::string shape = ": give [{\"id\", \"type\": \"function\", \"function\": {\"name\", "
                            "\"arguments\"}}]";
  if (!calls->is_array()) {
    return BadRequest(where + ".tool_calls must be a list" + shape, "messages");
  }
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& call = (*calls)[i];
    const std::string at = where + ".tool_calls[" + std::to_string(i) + "]";
    const std::string* id = call.is_object() ? StringField(call, "id") : nullptr;
    const std::string* type = call.is_object() ? StringField(call, "type") : nullptr;
    const json* function = call.is_object() ? Field(call, "function") : nullptr;
    if (id == nullptr || (type != nullptr && *type != "function") || function == nullptr ||
        !function->is_object()) {
      return BadRequest(at + " is not a function call" + shape, "messages");
    }
    const std::string* name = StringField(*function, "name");
    const std::string* arguments = StringField(*function, "arguments");
    if (name == nullptr || arguments == nullptr) {
      return BadRequest(at + ".function needs a string name and arguments (a JSON object as a "
                             "string)",
                        "messages");
    }
    // The templates print the arguments as an object: they must be one, and no deeper than any
    // other JSON a client sends (the server copies and prints it recursively).
    if (JsonTextNestsDeeperThan(*arguments)) {
      return BadRequest(JsonNestingRefusal(at + ".function.arguments"), "messages");
    }
    const json parsed = json::parse(*arguments, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) {
      return BadRequest(at + ".function.arguments must be a JSON object, as a string", "messages");
    }
    v1::ToolCall& out_call = *out.add_tool_calls();
    out_call.set_id(*id);
    out_call.set_name(*name);
    out_call.set_arguments(*arguments);
  }
  return std::nullopt;
}

json ToolCallsJson(const std::vector<v1::ToolCall>& calls) {
  json out = json::array();
  for (const v1::ToolCall& call : calls) {
    out.push_back({{"id", call.id()},
                   {"type", "function"},
                   {"function", {{"name", call.name()}, {"arguments", call.arguments()}}}});
  }
  return out;
}

json ToolCallDeltasJson(const v1::GenerateResponse& response) {
  if (response.tool_calls().empty()) return nullptr;
  json out = json::array();
  for (const v1::ToolCallDelta& delta : response.tool_calls()) {
    json entry = {{"index", delta.index()}};
    json function = {{"arguments", delta.arguments()}};
    if (!delta.id().empty()) {
      entry["id"] = delta.id();
      entry["type"] = "function";
      function["name"] = delta.name();
    }
    entry["function"] = std::move(function);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace tokenmill::gateway
