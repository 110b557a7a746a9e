#include "text/chat/chat_template.h"

#include <array>
#include <fstream>
#include <sstream>

namespace tokenmill {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kTemplateKey = "tokenizer.chat_template";
// Messages, tools and extra variables sit one level below the template's variables object.
constexpr int kMaxNesting = jinja::kMaxVariableNesting - 1;
constexpr std::array<std::string_view, 6> kRoles = {"system",    "developer", "user",
                                                    "assistant", "tool",      "ipython"};

std::string RoleList() {
  std::string out;
  for (size_t i = 0; i < kRoles.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == kRoles.size() ? " or " : ", ") + std::string(kRoles[i]);
  }
  return out;
}

StatusOr<std::string> TokenString(const GgufFile& gguf, std::string_view id_key,
                                  const std::vector<std::string_view>& tokens) {
  if (!gguf.Has(id_key)) return std::string();
  TM_ASSIGN_OR_RETURN(const uint32_t id, gguf.GetU32(id_key));
  if (id >= tokens.size()) {
    return InvalidArgumentError(std::string(id_key) + " is " + std::to_string(id) +
                                " but the vocabulary has " + std::to_string(tokens.size()) +
                                " tokens");
  }
  return std::string(tokens[id]);
}

Status ValidateContent(const Json& message, const std::string& where) {
  const std::string& role = message["role"].get_ref<const std::string&>();
  const auto content = message.find("content");
  const bool has_tool_calls = message.contains("tool_calls") && !message["tool_calls"].is_null();
  if (has_tool_calls && !message["tool_calls"].is_array()) {
    return InvalidArgumentError(where + ": 'tool_calls' must be a list");
  }
  if (content == message.end() || content->is_null()) {
    if (role == "assistant" && has_tool_calls) return OkStatus();
    return InvalidArgumentError(where + " (role '" + role + "') has no 'content'");
  }
  if (content->is_string()) return OkStatus();
  if (content->is_array()) {
    for (size_t i = 0; i < content->size(); ++i) {
      const Json& part = (*content)[i];
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
        return InvalidArgumentError(where + ": content[" + std::to_string(i) +
                                    "] must be an object with a string 'type'");
      }
    }
    return OkStatus();
  }
  return InvalidArgumentError(where + ": 'content' must be a string or a list of parts, not " +
                              std::string(content->type_name()));
}

}  // namespace

Status ValidateChatMessages(const Json& messages) {
  if (!messages.is_array()) return InvalidArgumentError("'messages' must be a list of messages");
  if (jinja::NestsDeeperThan(messages, kMaxNesting)) {
    return InvalidArgumentError("'messages' nests deeper than " + std::to_string(kMaxNesting) +
                                " levels");
  }
  if (messages.empty())
    return InvalidArgumentError("'messages' is empty: send at least one message");
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& message = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) return InvalidArgumentError(where + " is not an object");
    const auto role = message.find("role");
    if (role == message.end()) return InvalidArgumentError(where + " has no 'role'");
    if (!role->is_string()) return InvalidArgumentError(where + ": 'role' must be a string");
    const std::string& name = role->get_ref<const std::string&>();
    if (std::find(kRoles.begin(), kRoles.end(), name) == kRoles.end()) {
      return InvalidArgumentError(where + ": unknown role '" + name + "' (expected " + RoleList() +
                                  ")");
    }
    TM_RETURN_IF_ERROR(ValidateContent(message, where));
  }
  return OkStatus();
}

StatusOr<ChatSpecialTokens> ChatSpecialTokensFromGguf(const GgufFile& gguf) {
  ChatSpecialTokens tokens;
  if (!gguf.Has("tokenizer.ggml.tokens")) return tokens;
  TM_ASSIGN_OR_RETURN(const std::vector<std::string_view> vocab,
                      gguf.GetStringArray("tokenizer.ggml.tokens"));
  TM_ASSIGN_OR_RETURN(tokens.bos_token, TokenString(gguf, "tokenizer.ggml.bos_token_id", vocab));
  TM_ASSIGN_OR_RETURN(tokens.eos_token, TokenString(gguf, "tokenizer.ggml.eos_token_id", vocab));
  return tokens;
}

StatusOr<ChatTemplate> ChatTemplate::FromGguf(const GgufFile& gguf) {
  if (!gguf.Has(kTemplateKey)) {
    return FailedPreconditionError(
        "the model has no chat template (no 'tokenizer.chat_template' in its GGUF): give one "
        "with --chat-template FILE, or send a plain prompt instead of chat messages");
  }
  TM_ASSIGN_OR_RETURN(const std::string_view source, gguf.GetString(kTemplateKey));
  TM_ASSIGN_OR_RETURN(ChatSpecialTokens tokens, ChatSpecialTokensFromGguf(gguf));
  StatusOr<ChatTemplate> result = FromSource(std::string(source), std::move(tokens));
  if (!result.ok()) {
    return Status(result.status().code(), "the model's chat template (" +
                                              std::string(kTemplateKey) +
                                              ") is not usable: " + result.status().message());
  }
  return result;
}

StatusOr<ChatTemplate> ChatTemplate::FromFile(const std::string& path, ChatSpecialTokens tokens) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return NotFoundError("cannot open chat template file '" + path + "'");
  std::ostringstream text;
  text << file.rdbuf();
  StatusOr<ChatTemplate> result = FromSource(text.str(), std::move(tokens));
  if (!result.ok()) {
    return Status(result.status().code(),
                  "chat template file '" + path + "': " + result.status().message());
  }
  return result;
}

StatusOr<ChatTemplate> ChatTemplate::FromSource(std::string source, ChatSpecialTokens tokens) {
  if (source.find_first_not_of(" \t\r\n") == std::string::npos) {
    return InvalidArgumentError("the chat template is empty");
  }
  TM_ASSIGN_OR_RETURN(jinja::Template compiled, jinja::Template::Parse(source));
  return ChatTemplate(std::move(source), std::move(compiled), std::move(tokens));
}

std::vector<TextRange> PromptMarkup(const jinja::MarkedText& rendered) {
  std::vector<TextRange> out;
  out.reserve(rendered.template_spans.size());
  for (const jinja::ByteSpan& span : rendered.template_spans) out.push_back({span.begin, span.end});
  return out;
}

StatusOr<std::string> ChatTemplate::Render(const ChatRequest& request) const {
  TM_ASSIGN_OR_RETURN(jinja::MarkedText rendered, RenderMarked(request));
  return std::move(rendered.text);
}

StatusOr<jinja::MarkedText> ChatTemplate::RenderMarked(const ChatRequest& request) const {
  TM_RETURN_IF_ERROR(ValidateChatMessages(request.messages));
  if (!request.tools.is_null() && !request.tools.is_array()) {
    return InvalidArgumentError("'tools' must be a list of tool definitions");
  }
  if (jinja::NestsDeeperThan(request.tools, kMaxNesting)) {
    return InvalidArgumentError("'tools' nests deeper than " + std::to_string(kMaxNesting) +
                                " levels");
  }
  if (!request.extra_variables.is_object()) {
    return InvalidArgumentError("extra template variables must be a JSON object");
  }
  if (jinja::NestsDeeperThan(request.extra_variables, kMaxNesting)) {
    return InvalidArgumentError("extra template variables nest deeper than " +
                                std::to_string(kMaxNesting) + " levels");
  }
  // The variables Hugging Face passes: messages, tools, documents, add_generation_prompt,
  // then the special tokens and the caller's extra keyword arguments.
  Json variables = Json::object();
  variables["messages"] = request.messages;
  variables["tools"] = request.tools;
  variables["documents"] = nullptr;
  variables["add_generation_prompt"] = request.add_generation_prompt;
  variables["bos_token"] = tokens_.bos_token;
  variables["eos_token"] = tokens_.eos_token;
  // The special tokens the template prints are its markup, unless the client replaced them;
  // so are the role names, which ValidateChatMessages checked (templates write '<|' + role).
  jinja::Markup markup{.variables = {"bos_token", "eos_token"},
                       .words = {kRoles.begin(), kRoles.end()}};
  for (auto it = request.extra_variables.begin(); it != request.extra_variables.end(); ++it) {
    if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt") {
      return InvalidArgumentError("extra template variable '" + it.key() +
                                  "' would replace the request's own");
    }
    std::erase(markup.variables, it.key());
    variables[it.key()] = it.value();
  }
  return compiled_.RenderMarked(variables, markup);
}

}  // namespace tokenmill
