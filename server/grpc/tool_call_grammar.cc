#include "server/grpc/tool_call_grammar.h"

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"

namespace tokenmill::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kRootRule = "root ::= ";
constexpr std::string_view kCallRule = "tool-call ::= ";

// The markup around the calls, as GBNF: `call` is one call object.
std::string CallsRule(ToolCallFormat format, bool parallel) {
  switch (format) {
    case ToolCallFormat::kHermes: {
      const std::string one = "\"<tool_call>\\n\" tool-call \"\\n</tool_call>\"";
      return one + (parallel ? " (\"\\n\" " + one + ")*" : "");
    }
    case ToolCallFormat::kLlama3Json:
      return parallel ? "tool-call (\"; \" tool-call)*" : "tool-call";
    case ToolCallFormat::kMistral:
      return std::string("\"[TOOL_CALLS][\" tool-call") + (parallel ? " (\", \" tool-call)*" : "") +
             " \"]\"";
    case ToolCallFormat::kJson: break;
  }
  return parallel ? "\"[\" tool-call (\", \" tool-call)* \"]\"" : "tool-call";
}

// Moves a tool's $defs / definitions to the document's root, where its "#/$defs/..." refs
// now point.
Status HoistDefinitions(Json& parameters, const std::string& tool, Json& root) {
  for (const char* key : {"$defs", "definitions"}) {
    const auto defs = parameters.find(key);
    if (defs == parameters.end()) continue;
    if (!defs->is_object()) {
      return InvalidArgumentError("tools: '" + tool + "' parameters." + key + " must be an object");
    }
    Json& shared = root[key];
    for (auto it = defs->begin(); it != defs->end(); ++it) {
      if (shared.contains(it.key()) && shared[it.key()] != it.value()) {
        return InvalidArgumentError("tools: '" + tool + "' defines " + key + "/" + it.key() +
                                    " unlike another tool: a forced call needs one meaning "
                                    "for each; rename it");
      }
      shared[it.key()] = it.value();
    }
    parameters.erase(key);
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::string> ForcedToolCallGbnf(ToolCallFormat format, std::string_view tools_json,
                                         std::string_view function_name, bool parallel,
                                         const grammar::GrammarLimits& limits) {
  const Json tools = Json::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  if (!tools.is_array() || tools.empty()) {
    return InvalidArgumentError("chat.tool_choice forces a call: give chat.tools_json, a JSON "
                                "array of tools");
  }
  const char* arguments_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  Json document = Json::object();
  Json calls = Json::array();
  for (const Json& tool : tools) {
    const Json* function = tool.is_object() && tool.contains("function") ? &tool["function"]
                                                                         : &tool;
    if (!function->is_object() || !function->contains("name") ||
        !(*function)["name"].is_string()) {
      return InvalidArgumentError("chat.tools_json: each tool needs function.name");
    }
    const std::string name = (*function)["name"].get<std::string>();
    if (!function_name.empty() && name != function_name) continue;
    // No parameters: any object, as OpenAI takes it.
    Json parameters = function->contains("parameters") ? (*function)["parameters"]
                                                       : Json{{"type", "object"}};
    if (!parameters.is_object()) {
      return InvalidArgumentError("tools: '" + name + "' parameters must be a JSON Schema object");
    }
    TM_RETURN_IF_ERROR(HoistDefinitions(parameters, name, document));
    // Generated key order: name, then arguments (the parsers stream arguments after a name).
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", name}}}, {arguments_key, parameters}}},
                     {"required", {"name", arguments_key}}});
  }
  if (calls.empty()) {
    return InvalidArgumentError("chat.tool_choice names the function '" +
                                std::string(function_name) + "', which is not in chat.tools_json");
  }
  document["anyOf"] = std::move(calls);
  StatusOr<std::string> gbnf = grammar::JsonSchemaToGbnf(document.dump(), limits);
  if (!gbnf.ok()) {
    return Status(gbnf.status().code(), "tools: " + gbnf.status().message());
  }
  // The schema's root becomes one call; the new root is the family's markup around calls.
  std::string out = std::move(*gbnf);
  if (!out.starts_with(kRootRule)) return InternalError("JSON Schema GBNF without a root rule");
  out.replace(0, kRootRule.size(), kCallRule);
  return std::string(kRootRule) + CallsRule(format, parallel) + "\n" + out;
}

}  // namespace tokenmill::server
