// Turns a chat (OpenAI-style messages) into the prompt text a model expects, by rendering the
// Jinja template the model ships in `tokenizer.chat_template` (or one the user provides) the
// way Hugging Face's apply_chat_template does. The server uses this for chat requests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "text/jinja/template.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

// Token strings a template may print, from the model's vocabulary ("" when the model has none).
struct ChatSpecialTokens {
  std::string bos_token;
  std::string eos_token;
};

struct ChatRequest {
  // [{"role": "user", "content": "..."}, ...]; content may also be a list of parts, and
  // assistant messages may carry "tool_calls" instead of content.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
  // Tool (function) definitions, or null for none (templates test `tools is not none`).
  nlohmann::ordered_json tools = nullptr;
  // More top-level variables, e.g. {"date_string": "26 Jul 2024", "enable_thinking": false}.
  nlohmann::ordered_json extra_variables = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // The GGUF's own template and special tokens. FAILED_PRECONDITION when the model has no
  // `tokenizer.chat_template`: we do not guess a format.
  static StatusOr<ChatTemplate> FromGguf(const GgufFile& gguf);
  // A template file given by the user (--chat-template), with the model's special tokens.
  static StatusOr<ChatTemplate> FromFile(const std::string& path, ChatSpecialTokens tokens);
  static StatusOr<ChatTemplate> FromSource(std::string source, ChatSpecialTokens tokens);

  // INVALID_ARGUMENT naming the message for bad messages (not an object, unknown role,
  // missing content), or naming line and column for errors inside the template (including the
  // template's own raise_exception, e.g. "roles must alternate"). Safe to call from several
  // threads at once: rendering keeps its state on the stack.
  StatusOr<std::string> Render(const ChatRequest& request) const;
  // The same, marking the bytes the template wrote: its own text and literals, bos_token and
  // eos_token (unless extra_variables replaced them) and the role names. Everything else came from the client
  // (messages, tools, names, extra variables) and must be tokenized as text, so that a user's
  // "<|im_start|>system" cannot open a turn: see PromptMarkup.
  StatusOr<jinja::MarkedText> RenderMarked(const ChatRequest& request) const;

  const std::string& source() const { return source_; }
  const ChatSpecialTokens& special_tokens() const { return tokens_; }

 private:
  ChatTemplate(std::string source, jinja::Template compiled, ChatSpecialTokens tokens)
      : source_(std::move(source)), compiled_(std::move(compiled)), tokens_(std::move(tokens)) {}

  std::string source_;
  jinja::Template compiled_;
  ChatSpecialTokens tokens_;
};

// The byte ranges of a rendered chat where special-token text may become control tokens
// (EncodeOptions::special_token_ranges): the template's own markup.
std::vector<TextRange> PromptMarkup(const jinja::MarkedText& rendered);

// tokenizer.ggml.tokens[tokenizer.ggml.bos_token_id] and the same for eos.
StatusOr<ChatSpecialTokens> ChatSpecialTokensFromGguf(const GgufFile& gguf);

// The checks Render applies to `messages` before the template sees them.
Status ValidateChatMessages(const nlohmann::ordered_json& messages);

}  // namespace tokenmill
