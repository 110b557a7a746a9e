// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) mapped to and from
// the gateway's chat Generate requests: request bodies, the message, its stream events and
// errors in Anthropic's shapes. Pure functions of their inputs; the handler is
// anthropic_handler.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/api/openai/request_mapping.h"
#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

struct MessagesRequest {
  std::string model;
  v1::GenerateRequest generate;  // chat, sampling, max_tokens, stop sequences
  bool stream = false;
  std::string affinity_key;
  // "output_config.format" when it set a JSON Schema (named in the server's refusal).
  std::string structured_output_param;
};

// A /v1/messages body. Every field is mapped or refused with a 400 naming it; max_tokens is
// required, as Anthropic requires it.
std::optional<HttpError> ParseMessagesRequest(const nlohmann::json& body, MessagesRequest& out);

// chat.tools_json again from the request's text parsed keeping key order (nlohmann::json
// sorts keys): the template prints the tools, and a forced call generates arguments, in the
// client's order.
void KeepAnthropicToolsOrder(std::string_view body, v1::Chat& chat);

// A /v1/messages/count_tokens body: the prompt fields of a messages body, as a Tokenize call.
std::optional<HttpError> ParseCountTokensRequest(const nlohmann::json& body, TokenizeCall& out);

// A tool_use block's id for the server's call id, as Anthropic spells them: "toolu_" then
// the call's own letters ("call_abc" -> "toolu_abc"; Mistral's "abcdefghi" ->
// "toolu_abcdefghi"; Kimi K2's "functions.f:0" -> "toolu_functions.f:0"). CallIdOfToolUse gives
// Mistral's nine letters back for such an id sent back (its templates refuse other ids), and
// Kimi's functions.NAME:IDX (its template writes the id back where the model wrote it); every
// other id passes unchanged.
std::string ToolUseId(std::string_view call_id);
std::string CallIdOfToolUse(std::string_view tool_use_id);

// "end_turn", "max_tokens", "tool_use" or "stop_sequence" (with `stop_sequence` set).
struct StopReason {
  std::string reason;
  std::optional<std::string> stop_sequence;
};
StopReason AnthropicStopReason(v1::FinishReason finish, const std::string& stop_string);

struct TokenUsage {
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;  // of the prompt tokens, those served by the prefix cache
  uint64_t completion_tokens = 0;
};
// Anthropic counts cache reads apart from input_tokens: input_tokens are the uncached ones.
nlohmann::json AnthropicUsage(const TokenUsage& usage);

// The message object: `content` is its list of content blocks.
nlohmann::json MessageJson(const std::string& id, const std::string& model,
                           const nlohmann::json& content, const std::optional<StopReason>& stop,
                           const TokenUsage& usage);

// An error as Anthropic returns it: {"type": "error", "error": {"type", "message"}}, with
// Anthropic's status for it (529 overloaded_error where the gateway says 503).
struct AnthropicError {
  int status = 400;
  nlohmann::json body;
};
AnthropicError ToAnthropicError(const HttpError& error);

}  // namespace tokenmill::gateway
