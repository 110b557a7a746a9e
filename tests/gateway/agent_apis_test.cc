// The pure parts of the Anthropic Messages and OpenAI Responses APIs on the gateway: the
// response store's bounds and TTL, the order of a turn's blocks, the request mappings.
#include <gtest/gtest.h>

#include "gateway/api/anthropic/anthropic_messages.h"
#include "gateway/api/responses/response_store.h"
#include "gateway/api/responses/responses_api.h"
#include "gateway/api/turn_blocks.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;
using Clock = ResponseStore::Clock;

std::vector<v1::ChatMessage> Conversation(const std::string& text) {
  v1::ChatMessage message;
  message.set_role("user");
  message.set_content(text);
  return {message};
}

TEST(ResponseStore, KeepsAConversationUntilItsTtl) {
  ResponseStore store({.max_entries = 10, .max_bytes = 1 << 20, .ttl = std::chrono::seconds(60)});
  const Clock::time_point start = Clock::now();
  store.Put("resp-1", "", Conversation("hello"), "", "", start);
  ASSERT_TRUE(store.Get("resp-1", "", start + std::chrono::seconds(59)).has_value());
  EXPECT_EQ(store.Get("resp-1", "", start)->at(0).content(), "hello");
  EXPECT_FALSE(store.Get("resp-1", "", start + std::chrono::seconds(60)).has_value());
  EXPECT_FALSE(store.Get("resp-2", "", start).has_value());
  // Expired entries go on the next Put.
  store.Put("resp-2", "", Conversation("x"), "", "", start + std::chrono::seconds(61));
  EXPECT_EQ(store.size(), 1u);
}

TEST(ResponseStore, DropsTheOldestForRoom) {
  const std::string text(1000, 'a');
  const size_t one = std::string("resp-0").size() + Conversation(text)[0].ByteSizeLong();
  ResponseStore store({.max_entries = 3, .max_bytes = 2 * one, .ttl = std::chrono::hours(1)});
  const Clock::time_point now = Clock::now();
  for (int i = 0; i < 3; ++i) {
    store.Put("resp-" + std::to_string(i), "", Conversation(text), "", "", now);
  }
  EXPECT_FALSE(store.Get("resp-0", "", now).has_value());  // over max_bytes
  EXPECT_TRUE(store.Get("resp-1", "", now).has_value());
  EXPECT_TRUE(store.Get("resp-2", "", now).has_value());
  EXPECT_EQ(store.bytes(), 2 * one);
  // One conversation larger than the whole store is not kept, and takes nothing out.
  store.Put("resp-big", "", Conversation(std::string(3 * one, 'b')), "", "", now);
  EXPECT_FALSE(store.Get("resp-big", "", now).has_value());
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponseStore, CountsEntries) {
  ResponseStore store({.max_entries = 2, .max_bytes = 1 << 20, .ttl = std::chrono::hours(1)});
  const Clock::time_point now = Clock::now();
  for (const char* id : {"a", "b", "c"}) store.Put(id, "", Conversation(id), "", "", now);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.Get("a", "", now).has_value());
  store.Put("b", "", Conversation("again"), "", "", now);  // replaces, no eviction
  EXPECT_EQ(store.Get("b", "", now)->at(0).content(), "again");
  EXPECT_TRUE(store.Get("c", "", now).has_value());
}

TEST(ResponseStore, KeepsTheResponseObjectAndForgetsOnErase) {
  ResponseStore store({.max_entries = 10, .max_bytes = 1 << 20, .ttl = std::chrono::seconds(60)});
  const Clock::time_point now = Clock::now();
  store.Put("resp-1", "", Conversation("hello"), R"({"id": "resp-1"})", "", now);
  EXPECT_EQ(store.GetResponse("resp-1", "", now), std::optional<std::string>(R"({"id": "resp-1"})"));
  EXPECT_FALSE(store.GetResponse("resp-1", "", now + std::chrono::seconds(60)).has_value());
  const std::string response = R"({"id": "resp-1"})";
  const size_t message_bytes = Conversation("hello")[0].ByteSizeLong();
  EXPECT_EQ(store.bytes(), std::string("resp-1").size() + response.size() + message_bytes);
  EXPECT_TRUE(store.Erase("resp-1", "", now));
  EXPECT_FALSE(store.Get("resp-1", "", now).has_value());
  EXPECT_FALSE(store.GetResponse("resp-1", "", now).has_value());
  EXPECT_FALSE(store.Erase("resp-1", "", now));  // already gone
  EXPECT_EQ(store.bytes(), 0u);
  store.Put("resp-2", "", Conversation("x"), "{}", "", now);
  EXPECT_FALSE(store.Erase("resp-2", "", now + std::chrono::seconds(60)));  // expired: nothing live
  EXPECT_EQ(store.size(), 0u);
  store.Put("resp-3", "", Conversation("x"), "{}", "[1]", now);
  EXPECT_EQ(store.GetInputItems("resp-3", "", now), std::optional<std::string>("[1]"));
  EXPECT_EQ(store.bytes(), std::string("resp-3").size() + 2 + 3 + Conversation("x")[0].ByteSizeLong());
}

TEST(ResponsesApi, InputItemsGetTypesIdsStatusesAndContentParts) {
  int next = 0;
  const auto new_id = [&](std::string_view prefix) {
    return std::string(prefix) + "_" + std::to_string(next++);
  };
  const nlohmann::json text = InputItemsJson("hi", new_id);
  ASSERT_EQ(text.size(), 1u);
  EXPECT_EQ(text[0], nlohmann::json::parse(R"({"type": "message", "id": "msg_0", "role": "user",
      "content": [{"type": "input_text", "text": "hi"}], "status": "completed"})"));
  const nlohmann::json items = InputItemsJson(nlohmann::json::parse(R"([
      {"role": "user", "content": "q"},
      {"type": "message", "role": "assistant", "content": "a", "id": "msg_mine"},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "3"},
      {"role": "user", "content": [{"type": "input_text", "text": "parts"}]}])"), new_id);
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[0]["id"], "msg_1");
  EXPECT_EQ(items[0]["type"], "message");
  EXPECT_EQ(items[1]["id"], "msg_mine");  // the client's own
  EXPECT_EQ(items[1]["content"][0]["type"], "output_text");
  EXPECT_EQ(items[2]["id"], "fc_2");
  EXPECT_EQ(items[3]["id"], "fco_3");
  EXPECT_EQ(items[3]["output"], "3");
  EXPECT_EQ(items[4]["content"][0]["text"], "parts");
  for (const auto& item : items) EXPECT_EQ(item["status"], "completed");
}

TEST(ResponsesApi, InputItemsPagesNewestFirstAfterAnIdWithinTheLimit) {
  nlohmann::json items = nlohmann::json::array();
  for (const char* id : {"a", "b", "c", "d", "e"}) items.push_back({{"id", id}});
  const auto ids = [](const nlohmann::json& page) {
    std::string out;
    for (const auto& item : page["data"]) out += item["id"].get<std::string>();
    return out;
  };
  InputItemsQuery query;
  nlohmann::json page = InputItemsPage(items, query);
  EXPECT_EQ(ids(page), "edcba");
  EXPECT_EQ(page["object"], "list");
  EXPECT_EQ(page["first_id"], "e");
  EXPECT_EQ(page["last_id"], "a");
  EXPECT_FALSE(page["has_more"]);
  ASSERT_FALSE(ParseInputItemsQuery("limit=2&order=asc&after=a&include%5B%5D=x", query));
  page = InputItemsPage(items, query);
  EXPECT_EQ(ids(page), "bc");
  EXPECT_TRUE(page["has_more"]);
  query.after = "zzz";  // not an item of this response: nothing after it
  page = InputItemsPage(items, query);
  EXPECT_EQ(ids(page), "");
  EXPECT_TRUE(page["first_id"].is_null());
  for (const char* bad : {"limit=0", "limit=101", "limit=x", "order=up", "page=2"}) {
    InputItemsQuery refused;
    const std::optional<HttpError> error = ParseInputItemsQuery(bad, refused);
    ASSERT_TRUE(error.has_value()) << bad;
    EXPECT_EQ(error->status, 400) << bad;
  }
}

v1::GenerateResponse Response(const std::string& reasoning, const std::string& text) {
  v1::GenerateResponse response;
  response.set_reasoning_text(reasoning);
  response.set_text(text);
  return response;
}

v1::ToolCallDelta* AddCall(v1::GenerateResponse& response, uint32_t index, const char* id,
                           const char* arguments) {
  v1::ToolCallDelta* delta = response.add_tool_calls();
  delta->set_index(index);
  delta->set_id(id);
  delta->set_name(*id == '\0' ? "" : "get_weather");
  delta->set_arguments(arguments);
  return delta;
}

TEST(TurnBlocks, BlocksComeInTheOrderProducedAndSpaceBeforeACallIsDropped) {
  TurnBlocks turn;
  std::vector<TurnBlocks::Event> events = turn.Add(Response("Let me think.", ""));
  events = turn.Add(Response(" Done.", "\n\n"));  // the newlines wait for text
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].delta, " Done.");
  v1::GenerateResponse call = Response("", "");
  AddCall(call, 0, "call_1", "{\"city\": ");
  events = turn.Add(call);
  // The reasoning block stops, the call's starts (the pending newlines are dropped).
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, TurnBlocks::Event::Type::kStop);
  EXPECT_EQ(events[0].block, 0u);
  EXPECT_EQ(events[1].type, TurnBlocks::Event::Type::kStart);
  EXPECT_EQ(events[2].delta, "{\"city\": ");
  v1::GenerateResponse more = Response("", "");
  AddCall(more, 0, "", "\"Paris\"}");
  AddCall(more, 1, "call_2", "{}");
  events = turn.Add(more);
  ASSERT_EQ(events.size(), 4u);  // delta of call 0, its stop, start and delta of call 1
  EXPECT_EQ(turn.Finish().size(), 1u);
  ASSERT_EQ(turn.blocks().size(), 3u);
  EXPECT_EQ(turn.blocks()[0].kind, TurnBlock::Kind::kReasoning);
  EXPECT_EQ(turn.blocks()[0].text, "Let me think. Done.");
  EXPECT_EQ(turn.blocks()[1].text, "{\"city\": \"Paris\"}");
  EXPECT_EQ(turn.blocks()[1].call_id, "call_1");
  EXPECT_EQ(turn.blocks()[2].call_id, "call_2");
  EXPECT_TRUE(turn.has_tool_calls());
  EXPECT_TRUE(turn.Finish().empty());
}

TEST(TurnBlocks, SpaceJoinsTheTextThatFollows) {
  TurnBlocks turn;
  turn.Add(Response("", "\n"));
  const std::vector<TurnBlocks::Event> events = turn.Add(Response("", "Hi"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].delta, "\nHi");
  turn.Add(Response("", " "));  // inside an open text block: passed on at once
  EXPECT_EQ(turn.blocks().at(0).text, "\nHi ");
}

TEST(AnthropicMessages, ToolUseAndToolResultBecomeChatToolFields) {
  MessagesRequest out;
  const auto error = ParseMessagesRequest(json::parse(R"({
      "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
      "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "A tool.", "signature": ""},
          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold", "is_error": false},
          {"type": "text", "text": "And now?"}]}],
      "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "any", "disable_parallel_tool_use": true}})"),
                                          out);
  ASSERT_FALSE(error.has_value()) << error->message;
  const v1::Chat& chat = out.generate.chat();
  ASSERT_EQ(chat.messages_size(), 5);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(2).reasoning(), "A tool.");
  EXPECT_TRUE(chat.messages(2).has_content());  // "", not null, for the templates
  ASSERT_EQ(chat.messages(2).tool_calls_size(), 1);
  EXPECT_EQ(json::parse(chat.messages(2).tool_calls(0).arguments()), json({{"city", "Oslo"}}));
  EXPECT_EQ(chat.messages(3).role(), "tool");
  EXPECT_EQ(chat.messages(3).tool_call_id(), "toolu_1");
  EXPECT_EQ(chat.messages(3).name(), "get_weather");
  EXPECT_EQ(chat.messages(4).content(), "And now?");
  EXPECT_EQ(chat.tool_choice().mode(), v1::TOOL_CHOICE_MODE_REQUIRED);
  EXPECT_FALSE(chat.parallel_tool_calls());
  EXPECT_EQ(json::parse(chat.tools_json())[0]["function"]["name"], "get_weather");
  EXPECT_EQ(out.generate.max_tokens(), 9u);
}

TEST(AnthropicMessages, ErrorsTakeAnthropicsTypesAndStatuses) {
  EXPECT_EQ(ToAnthropicError(BadRequest("x")).body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(ToAnthropicError(Unauthorized()).body["error"]["type"], "authentication_error");
  const AnthropicError overloaded = ToAnthropicError(NoBackend());
  EXPECT_EQ(overloaded.status, 529);
  EXPECT_EQ(overloaded.body["error"]["type"], "overloaded_error");
  EXPECT_EQ(overloaded.body["type"], "error");
}

// A function_call item's arguments are JSON inside a string: the bound on client JSON
// (common/json_nesting.h) refuses them deeper than 64 levels, naming the item (issue 35).
TEST(ResponsesApi, DeepFunctionCallArgumentsAreRefusedNamingTheItem) {
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  ResponsesRequest out;
  const auto error = ParseResponsesRequest(
      {{"input", {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"},
                   {"arguments", deep}}}}},
      out);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->status, 400);
  EXPECT_EQ(error->param, "input");
  EXPECT_EQ(error->message, "input[0].arguments nests deeper than 64 levels of lists and objects");
}

// A type that is not a string, null too, is refused when the body is read: InputItemsJson,
// which lists the stored input after the answer, once threw on a null one (a 500).
TEST(ResponsesApi, AnItemsTypeThatIsNotAStringIsRefused) {
  for (const json& type : {json(nullptr), json(5), json::array({"message"})}) {
    ResponsesRequest out;
    const auto error = ParseResponsesRequest(
        {{"input", {{{"type", type}, {"role", "user"}, {"content", "hi"}}}}}, out);
    ASSERT_TRUE(error.has_value()) << type.dump();
    EXPECT_EQ(error->status, 400);
    EXPECT_EQ(error->param, "input");
    EXPECT_EQ(error->message, "input[0].type must be a string");
  }
  const json listed = InputItemsJson(json::parse(R"([{"type": null, "role": "user",
      "content": "hi"}])"), [](std::string_view prefix) { return std::string(prefix); });
  EXPECT_EQ(listed[0]["type"], "message");
}

// text.verbosity as chat completions' verbosity: low, medium or high, accepted and ignored.
TEST(ResponsesApi, TextVerbosityIsAcceptedAndIgnored) {
  for (const char* verbosity : {"low", "medium", "high"}) {
    ResponsesRequest out;
    const auto error =
        ParseResponsesRequest({{"input", "x"}, {"text", {{"verbosity", verbosity}}}}, out);
    ASSERT_FALSE(error.has_value()) << error->message;
    ASSERT_EQ(out.ignored_fields.size(), 1u);
    EXPECT_EQ(out.ignored_fields[0].name, "text.verbosity");
  }
  ResponsesRequest out;
  for (const json& verbosity : {json("verbose"), json(1)}) {
    const auto error = ParseResponsesRequest({{"input", "x"}, {"text", {{"verbosity", verbosity}}}},
                                             out);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->param, "text");
    EXPECT_TRUE(error->message.starts_with("text.verbosity")) << error->message;
  }
}

TEST(ResponsesApi, ItemsBecomeTheChatAfterInstructionsAndTheStoredConversation) {
  ResponsesRequest out;
  const auto error = ParseResponsesRequest(json::parse(R"({
      "instructions": "Be brief.",
      "input": [
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Call it."}]},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{\"a\": 1}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"role": "user", "content": "Thanks"}],
      "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]})"),
                                           out);
  ASSERT_FALSE(error.has_value()) << error->message;
  v1::Chat chat;
  BuildResponsesChat(out, Conversation("earlier"), chat);
  ASSERT_EQ(chat.messages_size(), 5);
  EXPECT_EQ(chat.messages(0).content(), "Be brief.");
  EXPECT_EQ(chat.messages(1).content(), "earlier");
  EXPECT_EQ(chat.messages(2).role(), "assistant");
  EXPECT_EQ(chat.messages(2).reasoning(), "Call it.");
  EXPECT_EQ(chat.messages(2).tool_calls(0).id(), "call_1");
  EXPECT_EQ(chat.messages(3).name(), "f");
  EXPECT_EQ(chat.messages(3).content(), "42");
  EXPECT_FALSE(chat.tools_json().empty());
  EXPECT_TRUE(out.store);
}

}  // namespace
}  // namespace tokenmill::gateway
