// Tool calls and reasoning on the gateway's side. Requests: OpenAI's tools, tool_choice,
// parallel_tool_calls, chat_template_kwargs and the assistant / tool message fields become
// v1::Chat's (the Anthropic and Responses APIs fill the same fields). Responses: the server
// parses the output (v1::GenerateResponse's text, reasoning_text and tool_calls deltas);
// AssistantTurn assembles a sequence's turn from them, and the *Json functions give OpenAI's
// chat shapes.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

// One sequence's assistant turn, assembled from its responses.
struct AssistantTurn {
  std::string content;
  std::string reasoning;
  std::vector<v1::ToolCall> tool_calls;

  // Appends a response's text, reasoning_text and tool-call deltas.
  void Add(const v1::GenerateResponse& response);
};

// The chat body fields read here.
const std::set<std::string_view>& ToolParams();

// tools (OpenAI's [{"type": "function", "function": {"name", "description", "parameters",
// "strict"}}]), tool_choice ("none", "auto", "required", {"type": "function", "function":
// {"name"}}), parallel_tool_calls and chat_template_kwargs, checked, into `chat`.
std::optional<HttpError> ParseToolParams(const nlohmann::json& body, v1::Chat& chat);
// chat.tools_json again from `body` parsed keeping key order (nlohmann::json sorts keys): the
// template prints the tools, and a forced call generates arguments, in the client's order.
void KeepToolsOrder(const nlohmann::ordered_json& body, v1::Chat& chat);

// A forced call (tool_choice required or named) is a constraint; the field in
// `structured_output_param` would set another: a 400 naming both.
std::optional<HttpError> RefuseTwoConstraints(const v1::Chat& chat,
                                              const std::string& structured_output_param);

// The message keys ParseMessageToolFields reads besides role and content.
bool IsToolMessageKey(std::string_view key);
// An OpenAI message's tool fields into `out`: an assistant's tool_calls ([{"id", "type":
// "function", "function": {"name", "arguments" (a JSON object as a string)}}]) and
// reasoning_content / reasoning, a tool message's tool_call_id (required) and name.
std::optional<HttpError> ParseMessageToolFields(const nlohmann::json& message, size_t index,
                                                const std::string& role, v1::ChatMessage& out);

// Appends a response's tool-call deltas to `calls` (a delta with a new index starts a call;
// the next ones append arguments).
void AppendToolCallDeltas(const v1::GenerateResponse& response, std::vector<v1::ToolCall>& calls);

// A chat completion's message: content (null when the turn is only tool calls), the
// reasoning as reasoning_content and reasoning (when there is some), and tool_calls.
nlohmann::json ChatMessageJson(const std::string& content, const std::string& reasoning,
                               const std::vector<v1::ToolCall>& calls);
// Adds a response's reasoning_text and tool-call deltas to a chat chunk's delta.
void AddParsedDelta(const v1::GenerateResponse& response, nlohmann::json& chunk);

// message.tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
nlohmann::json ToolCallsJson(const std::vector<v1::ToolCall>& calls);
// delta.tool_calls of one response: [{"index", "id", "type", "function": {"name",
// "arguments"}}], id, type and name on a call's first delta only. Null when it has none.
nlohmann::json ToolCallDeltasJson(const v1::GenerateResponse& response);

}  // namespace tokenmill::gateway
