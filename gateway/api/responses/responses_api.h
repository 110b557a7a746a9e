// OpenAI's Responses API (POST /v1/responses) mapped to and from the gateway's chat Generate
// requests: request bodies (input as a string or items, instructions, tools, text.format), the
// response object, its output items and its stream events. Pure functions of their inputs;
// the handler is responses_handler.h, the conversations of stored responses response_store.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/api/ignored_fields.h"
#include "gateway/api/turn_blocks.h"
#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

struct ResponsesRequest {
  std::string model;
  // Sampling, max_tokens and the constraint; its chat is built by BuildResponsesChat.
  v1::GenerateRequest generate;
  std::optional<std::string> instructions;  // a system message before everything else
  std::vector<v1::ChatMessage> input;       // the messages of `input`
  v1::Chat tools;  // tools_json, tool_choice and parallel_tool_calls; no messages
  std::string previous_response_id;         // empty: none
  bool stream = false;
  bool store = true;
  std::string affinity_key;  // prompt_cache_key; empty: from the chat
  // "text.format" when it set a constraint (named in the server's refusal), else empty.
  std::string structured_output_param;
  // The request's settings the response object repeats (instructions, tools, text, ...).
  nlohmann::json echo;
  // `input` as the client sent it (validated), for InputItemsJson.
  nlohmann::json raw_input;
  std::vector<IgnoredField> ignored_fields;  // sent, accepted, without effect (logged once)
};

// A /v1/responses body. Every field is mapped or refused with a 400 naming it.
std::optional<HttpError> ParseResponsesRequest(const nlohmann::json& body,
                                               ResponsesRequest& out);

// The chat to generate from: the instructions, then the conversation continued (that of
// previous_response_id), then the input.
void BuildResponsesChat(const ResponsesRequest& request,
                        const std::vector<v1::ChatMessage>& previous, v1::Chat& chat);

// 404 previous_response_not_found, saying why an id may be unknown (another tenant's
// response answers the same: nothing tells that it exists).
HttpError PreviousResponseNotFound(const std::string& id, int ttl_seconds);

// chat.tools_json again from the request's text parsed keeping key order (nlohmann::json
// sorts keys): the template prints the tools, and a forced call generates arguments, in the
// client's order.
void KeepResponsesToolsOrder(std::string_view body, v1::Chat& chat);

// "rs", "msg" or "fc": the id prefix of a block's output item.
const char* ItemIdPrefix(const TurnBlock& block);
// A block's output item (a reasoning item, a message with one output_text part, a
// function_call); `empty` leaves out its text, as output_item.added shows it.
nlohmann::json OutputItemJson(const TurnBlock& block, const std::string& id,
                              const std::string& status, bool empty);
// The content part of a reasoning or message item.
nlohmann::json ContentPartJson(TurnBlock::Kind kind, const std::string& text);

struct ResponseUsage {
  uint64_t input_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t output_tokens = 0;
};

// The response object. `status` is in_progress, completed, incomplete or failed;
// `incomplete_reason` (max_output_tokens) goes with incomplete, `error` with failed.
struct ResponseState {
  std::string id;
  int64_t created_at = 0;
  std::string model;
  std::string status = "in_progress";
  nlohmann::json output = nlohmann::json::array();
  std::optional<ResponseUsage> usage;
  std::string incomplete_reason;
  std::optional<HttpError> error;
};
nlohmann::json ResponseJson(const ResponsesRequest& request, const ResponseState& state);

// The input items of a response as GET /v1/responses/{id}/input_items lists them: a string
// input as one user message, each item with its type, an id (the client's, or new_id(prefix)
// with "msg", "fc", "fco" or "rs"), a status, and a message's string content as one
// input_text part (output_text for an assistant's).
nlohmann::json InputItemsJson(const nlohmann::json& raw_input,
                              const std::function<std::string(std::string_view)>& new_id);

// One page of `items` (oldest first) as the list object of input_items: order "desc" (the
// default) or "asc", `after` an item id (the page starts past it), limit 1..100 (default 20).
// The query's fields come from GET's query string; a bad value is a 400 naming it.
struct InputItemsQuery {
  std::string order = "desc";
  std::string after;
  int limit = 20;
};
std::optional<HttpError> ParseInputItemsQuery(std::string_view query, InputItemsQuery& out);
nlohmann::json InputItemsPage(const nlohmann::json& items, const InputItemsQuery& query);

}  // namespace tokenmill::gateway
