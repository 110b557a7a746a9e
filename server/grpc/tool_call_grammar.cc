#include "server/grpc/tool_call_grammar.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <utility>
#include <vector>

#include "common/json_nesting.h"
#include "grammar/json_schema.h"
#include "text/chat/section_tool_calls.h"

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
    case ToolCallFormat::kMistralV11:  // each call has its own marker (NamedCallsGbnf)
      return parallel ? "tool-call+" : "tool-call";
    // One call: <|call|> ends a harmony turn (an end-of-generation token), so a model calls
    // one function per turn and sees its result before the next.
    case ToolCallFormat::kHarmony: return "tool-call";
    // A section around named calls (NamedCallsGbnf); V3's template breaks the line between them.
    case ToolCallFormat::kDeepSeekV3:
      return std::string("\"<｜tool▁calls▁begin｜>\" tool-call") +
             (parallel ? " (\"\\n\" tool-call)*" : "") + " \"<｜tool▁calls▁end｜>\"";
    case ToolCallFormat::kDeepSeekV31:
      return std::string("\"<｜tool▁calls▁begin｜>\" tool-call") + (parallel ? "+" : "") +
             " \"<｜tool▁calls▁end｜>\"";
    case ToolCallFormat::kKimiK2:
      return std::string("\"<|tool_calls_section_begin|>\" tool-call") + (parallel ? "+" : "") +
             " \"<|tool_calls_section_end|>\"";
    case ToolCallFormat::kJson: break;
  }
  return parallel ? "\"[\" tool-call (\", \" tool-call)* \"]\"" : "tool-call";
}

struct Tool {
  std::string name;
  Json parameters;
};

// `gbnf` with each rule name prefixed: rules of several grammars in one, apart. Names are
// what stands outside string literals and character classes.
std::string PrefixRuleNames(std::string_view gbnf, const std::string& prefix) {
  std::string out;
  char quote = 0;  // '"' or ']' while inside a literal or a class
  for (size_t i = 0; i < gbnf.size(); ++i) {
    const char c = gbnf[i];
    if (quote != 0) {
      out += c;
      if (c == '\\' && i + 1 < gbnf.size()) out += gbnf[++i];
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '[') {
      quote = c == '"' ? '"' : ']';
      out += c;
    } else if (std::isalpha(static_cast<unsigned char>(c)) &&
               (i == 0 || !(std::isalnum(static_cast<unsigned char>(gbnf[i - 1])) ||
                            gbnf[i - 1] == '-'))) {
      out += prefix;
      out += c;
    } else {
      out += c;
    }
  }
  return out;
}

// The markup before and after a call's arguments where the function's name stands outside
// the JSON, as GBNF: Mistral v11's [TOOL_CALLS]name[ARGS]{...}, harmony's
// <|channel|>commentary to=functions.name <|constrain|>json<|message|>{...}<|call|>,
// DeepSeek's <｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜> (V3:
// function<｜tool▁sep｜>name and the arguments in a ```json fence) and Kimi K2's
// <|tool_call_begin|>functions.name:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>, its
// index the model's to write (its template counts the conversation's calls).
std::pair<std::string, std::string> NamedCallMarkup(ToolCallFormat format,
                                                    const std::string& name) {
  const auto literal = [](const std::string& text) { return Json(text).dump(); };
  switch (format) {
    case ToolCallFormat::kHarmony:
      return {literal("<|channel|>commentary to=functions." + name +
                      " <|constrain|>json<|message|>"),
              literal("<|call|>")};
    case ToolCallFormat::kDeepSeekV3:
      return {literal("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n"),
              literal("\n```<｜tool▁call▁end｜>")};
    case ToolCallFormat::kDeepSeekV31:
      return {literal("<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>"),
              literal("<｜tool▁call▁end｜>")};
    case ToolCallFormat::kKimiK2:
      return {literal("<|tool_call_begin|>functions." + name + ":") + " [0-9]{1,6} " +
                  literal("<|tool_call_argument_begin|>"),
              literal("<|tool_call_end|>")};
    default: break;
  }
  return {literal("[TOOL_CALLS]" + name + "[ARGS]"), ""};
}

// Calls whose name is outside the JSON (NamedCallMarkup): each tool's parameters are a
// grammar of their own, their rules prefixed apart.
StatusOr<std::string> NamedCallsGbnf(ToolCallFormat format, const std::vector<Tool>& tools,
                                     bool parallel, const grammar::GrammarLimits& limits) {
  std::string call = std::string(kCallRule);
  std::string rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    StatusOr<std::string> gbnf = grammar::JsonSchemaToGbnf(tools[i].parameters.dump(), limits);
    if (!gbnf.ok()) {
      return Status(gbnf.status().code(),
                    "tools: '" + tools[i].name + "' parameters: " + gbnf.status().message());
    }
    std::string prefix = "t";
    prefix += std::to_string(i);
    prefix += '-';
    const auto [before, after] = NamedCallMarkup(format, tools[i].name);
    if (i > 0) call += " | ";
    call += before;
    call += ' ';
    call += prefix;
    call += "root";
    if (!after.empty()) call += ' ' + after;
    rules += PrefixRuleNames(*gbnf, prefix);
  }
  return std::string(kRootRule) + CallsRule(format, parallel) + "\n" + call + "\n" + rules;
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
  // Its parameters are printed for the schema converter, which recurses (as it refuses too).
  if (JsonTextNestsDeeperThan(tools_json)) {
    return InvalidArgumentError(JsonNestingRefusal("chat.tools_json"));
  }
  const Json tools = Json::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  if (!tools.is_array() || tools.empty()) {
    return InvalidArgumentError("chat.tool_choice forces a call: give chat.tools_json, a JSON "
                                "array of tools");
  }
  std::vector<Tool> offered;
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
    offered.push_back({name, std::move(parameters)});
  }
  if (offered.empty()) {
    return InvalidArgumentError("chat.tool_choice names the function '" +
                                std::string(function_name) + "', which is not in chat.tools_json");
  }
  if (format == ToolCallFormat::kMistralV11 || format == ToolCallFormat::kHarmony ||
      IsSectionFormat(format)) {
    return NamedCallsGbnf(format, offered, parallel, limits);
  }
  const char* arguments_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  Json document = Json::object();
  Json calls = Json::array();
  for (Tool& tool : offered) {
    TM_RETURN_IF_ERROR(HoistDefinitions(tool.parameters, tool.name, document));
    // Generated key order: name, then arguments (the parsers stream arguments after a name).
    calls.push_back(
        {{"type", "object"},
         {"properties", {{"name", {{"const", tool.name}}}, {arguments_key, tool.parameters}}},
         {"required", {"name", arguments_key}}});
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
