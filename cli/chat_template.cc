// `tokenmill render-chat --model PATH --messages JSON`: the prompt text the model's chat
// template makes of a conversation, written to stdout exactly (no added newline).
#include "text/chat/chat_template.h"

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "gguf/gguf.h"

namespace tokenmill::cli {
namespace {

struct RenderChatOptions {
  std::string model_path;
  std::string messages;   // JSON text, or @FILE
  std::string tools;      // JSON text, or @FILE; empty: none
  std::string variables;  // JSON object text, or @FILE; empty: none
  std::string template_path;
  bool no_generation_prompt = false;
};

StatusOr<nlohmann::ordered_json> ParseJsonArgument(const std::string& flag,
                                                   const std::string& text) {
  std::string json_text = text;
  if (!text.empty() && text[0] == '@') {
    std::ifstream file(text.substr(1), std::ios::binary);
    if (!file) return NotFoundError("cannot open " + flag + " file '" + text.substr(1) + "'");
    std::ostringstream content;
    content << file.rdbuf();
    json_text = content.str();
  }
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(json_text, nullptr, false);
  if (value.is_discarded()) return InvalidArgumentError(flag + " is not valid JSON");
  return value;
}

Status RunRenderChat(const RenderChatOptions& options) {
  TM_ASSIGN_OR_RETURN(const GgufFile file, GgufFile::Open(options.model_path));
  ChatRequest request;
  TM_ASSIGN_OR_RETURN(request.messages, ParseJsonArgument("--messages", options.messages));
  if (!options.tools.empty()) {
    TM_ASSIGN_OR_RETURN(request.tools, ParseJsonArgument("--tools", options.tools));
  }
  if (!options.variables.empty()) {
    TM_ASSIGN_OR_RETURN(request.extra_variables, ParseJsonArgument("--vars", options.variables));
  }
  request.add_generation_prompt = !options.no_generation_prompt;
  StatusOr<ChatTemplate> chat_template = Status(InternalError("unset"));
  if (options.template_path.empty()) {
    chat_template = ChatTemplate::FromGguf(file);
  } else {
    TM_ASSIGN_OR_RETURN(ChatSpecialTokens tokens, ChatSpecialTokensFromGguf(file));
    chat_template = ChatTemplate::FromFile(options.template_path, std::move(tokens));
  }
  if (!chat_template.ok()) return chat_template.status();
  TM_ASSIGN_OR_RETURN(const std::string prompt, chat_template->Render(request));
  std::cout << prompt;
  return OkStatus();
}

}  // namespace

Command AddRenderChatCommand(CLI::App& app) {
  auto options = std::make_shared<RenderChatOptions>();
  CLI::App* sub = app.add_subcommand(
      "render-chat", "Render a conversation with the model's chat template (prompt to stdout)");
  sub->add_option("--model", options->model_path, "GGUF file")->required();
  sub->add_option("--messages", options->messages,
                  "JSON list of {role, content} messages, or @FILE")
      ->required();
  sub->add_option("--tools", options->tools, "JSON list of tool definitions, or @FILE");
  sub->add_option("--vars", options->variables,
                  "JSON object of extra template variables, or @FILE");
  sub->add_option("--chat-template", options->template_path,
                  "Jinja template file to use instead of the model's");
  sub->add_flag("--no-generation-prompt", options->no_generation_prompt,
                "Do not end with the assistant's turn header");
  return {sub, [options] {
            const Status status = RunRenderChat(*options);
            return status.ok() ? 0 : Fail(status);
          }};
}

}  // namespace tokenmill::cli
