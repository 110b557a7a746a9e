#include "text/chat/tool_preamble.h"

namespace tokenmill {
namespace {

using Json = nlohmann::ordered_json;

bool IsIdentifierChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

bool TemplateRendersTools(std::string_view source) {
  constexpr std::string_view kName = "tools";
  for (size_t at = source.find(kName); at != std::string_view::npos;
       at = source.find(kName, at + 1)) {
    const size_t end = at + kName.size();
    const bool starts = at == 0 || !IsIdentifierChar(source[at - 1]);
    const bool ends = end == source.size() || !IsIdentifierChar(source[end]);
    if (starts && ends) return true;
  }
  return false;
}

std::string GenericToolPreamble(const Json& tools) {
  std::string out = "You can call these tools (functions); each is given as a JSON object "
                    "with its name, description and the JSON schema of its arguments:\n";
  for (const Json& tool : tools) {
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) {
      continue;
    }
    const Json& function = tool["function"];
    Json shown = Json::object();
    for (const char* key : {"name", "description", "parameters"}) {
      if (function.contains(key)) shown[key] = function[key];
    }
    out += shown.dump() + "\n";
  }
  out += "\nTo call a tool, answer with this JSON object alone, nothing before or after it:\n"
         "{\"name\": \"<the tool's name>\", \"arguments\": {<its arguments, as its schema "
         "says>}}\n"
         "To call several tools at once, answer with a JSON list of such objects. "
         "Otherwise answer in plain text.";
  return out;
}

Json WithGenericToolPreamble(Json messages, const Json& tools) {
  if (!messages.is_array()) return messages;  // ValidateChatMessages refuses it
  const std::string preamble = GenericToolPreamble(tools);
  if (!messages.empty() && messages[0].is_object() && messages[0].contains("role") &&
      messages[0]["role"] == "system" &&
      messages[0].contains("content") && messages[0]["content"].is_string()) {
    Json& content = messages[0]["content"];
    const std::string text = content.get<std::string>();
    content = text.empty() ? preamble : preamble + "\n\n" + text;
    return messages;
  }
  messages.insert(messages.begin(), Json{{"role", "system"}, {"content", preamble}});
  return messages;
}

}  // namespace tokenmill
