// OpenAI JSON -> tokenmill.v1 requests: every parameter mapped or refused with its name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/json_nesting.h"
#include "common/request_limits.h"
#include "gateway/api/openai/request_mapping.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

CompletionRequest ParseOk(const json& body, Endpoint endpoint) {
  CompletionRequest out;
  const std::optional<HttpError> error = ParseCompletionRequest(body, endpoint, out);
  EXPECT_FALSE(error.has_value()) << (error ? error->message : "");
  return out;
}

HttpError ParseError(const json& body, Endpoint endpoint) {
  CompletionRequest out;
  std::optional<HttpError> error = ParseCompletionRequest(body, endpoint, out);
  EXPECT_TRUE(error.has_value()) << body.dump();
  return error.value_or(HttpError{});
}

TEST(GatewayRequestMapping, CompletionParametersReachTheGenerateRequest) {
  const CompletionRequest r = ParseOk(
      json::parse(R"({"model": "m", "prompt": "Hi", "max_tokens": 7, "temperature": 0.5,
                      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42,
                      "presence_penalty": 0.5, "frequency_penalty": -0.5,
                      "repetition_penalty": 1.1, "logit_bias": {"17": -100, "3": 2.5},
                      "min_tokens": 2, "stop": ["\n", "END"], "stop_token_ids": [2],
                      "ignore_eos": true, "n": 3, "logprobs": 2, "user": "u1",
                      "cache_salt": "tenant", "priority": -1})"),
      Endpoint::kCompletions);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.generates.size(), 1u);
  const v1::GenerateRequest& g = r.generates[0];
  EXPECT_EQ(g.text(), "Hi");
  EXPECT_EQ(g.max_tokens(), 7u);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_EQ(g.sampling().seed(), 42u);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.1f);
  EXPECT_EQ(g.sampling().logit_bias().size(), 2u);
  EXPECT_FLOAT_EQ(g.sampling().logit_bias().at(17), -100.0f);
  EXPECT_FLOAT_EQ(g.sampling().logit_bias().at(3), 2.5f);
  EXPECT_EQ(g.sampling().min_tokens(), 2u);
  ASSERT_EQ(g.stop_size(), 2);
  EXPECT_EQ(g.stop(1), "END");
  EXPECT_EQ(g.stop_token_ids(0), 2);
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_EQ(g.n(), 3u);
  EXPECT_EQ(r.n, 3u);
  EXPECT_TRUE(g.logprobs());
  EXPECT_EQ(g.top_logprobs(), 2u);
  EXPECT_EQ(g.cache_salt(), "tenant");
  EXPECT_EQ(g.priority(), -1);
  EXPECT_FALSE(r.stream);
}

TEST(GatewayRequestMapping, KvWindowReachesTheGenerateRequest) {
  const CompletionRequest r = ParseOk(
      json::parse(R"({"prompt": "Hi", "kv_window": {"sink_tokens": 8, "window_tokens": 64}})"),
      Endpoint::kCompletions);
  ASSERT_EQ(r.generates.size(), 1u);
  ASSERT_TRUE(r.generates[0].has_kv_window());
  EXPECT_EQ(r.generates[0].kv_window().sink_tokens(), 8u);
  EXPECT_EQ(r.generates[0].kv_window().window_tokens(), 64u);
  const CompletionRequest defaults =
      ParseOk(json::parse(R"({"prompt": "Hi", "kv_window": {}})"), Endpoint::kCompletions);
  EXPECT_TRUE(defaults.generates[0].has_kv_window());
  EXPECT_FALSE(defaults.generates[0].kv_window().has_sink_tokens());
  EXPECT_FALSE(
      ParseOk(json{{"prompt", "Hi"}}, Endpoint::kCompletions).generates[0].has_kv_window());
  EXPECT_EQ(ParseError(json{{"prompt", "Hi"}, {"kv_window", 4}}, Endpoint::kCompletions).param,
            "kv_window");
  EXPECT_EQ(ParseError(json::parse(R"({"prompt": "Hi", "kv_window": {"sinks": 4}})"),
                       Endpoint::kCompletions)
                .param,
            "kv_window");
  EXPECT_EQ(ParseError(json::parse(R"({"prompt": "Hi", "kv_window": {"sink_tokens": -1}})"),
                       Endpoint::kCompletions)
                .param,
            "sink_tokens");
}

TEST(GatewayRequestMapping, UnsetParametersStayUnset) {
  const CompletionRequest r = ParseOk(json{{"prompt", "Hi"}, {"temperature", nullptr}},
                                      Endpoint::kCompletions);
  const v1::GenerateRequest& g = r.generates[0];
  EXPECT_FALSE(g.has_max_tokens());
  EXPECT_FALSE(g.sampling().has_temperature());  // null is "not given"
  EXPECT_FALSE(g.sampling().has_seed());
  EXPECT_FALSE(g.has_n());
  EXPECT_FALSE(g.logprobs());
}

// echo with logprobs needs the prompt's entries (as many top ones as logprobs asks, or as
// prompt_logprobs if more); best_of runs best_of sequences with logprobs to rank them.
TEST(GatewayRequestMapping, EchoPromptLogprobsAndBestOf) {
  CompletionRequest r = ParseOk(json{{"prompt", "Hi"}, {"echo", true}}, Endpoint::kCompletions);
  EXPECT_TRUE(r.echo);
  EXPECT_FALSE(r.generates[0].has_prompt_logprobs());  // the text is the client's own
  r = ParseOk(json{{"prompt", "Hi"}, {"echo", true}, {"logprobs", 3}, {"prompt_logprobs", 1}},
              Endpoint::kCompletions);
  EXPECT_EQ(r.generates[0].prompt_logprobs(), 3u);
  EXPECT_EQ(r.prompt_logprobs, 1u);
  r = ParseOk(json{{"prompt", "Hi"}, {"prompt_logprobs", 0}}, Endpoint::kCompletions);
  EXPECT_TRUE(r.generates[0].has_prompt_logprobs());
  EXPECT_FALSE(r.echo);

  // Token ids echo too (the handler detokenizes them), and prompt entries stream with n > 1.
  r = ParseOk(json{{"prompt", {1, 2}}, {"echo", true}}, Endpoint::kCompletions);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.generates[0].has_token_ids());
  r = ParseOk(json{{"prompt", "Hi"}, {"prompt_logprobs", 1}, {"n", 2}, {"stream", true}},
              Endpoint::kCompletions);
  EXPECT_EQ(r.generates[0].prompt_logprobs(), 1u);
  EXPECT_EQ(r.generates[0].n(), 2u);

  r = ParseOk(json{{"prompt", "Hi"}, {"echo", true}, {"max_tokens", 0}}, Endpoint::kCompletions);
  EXPECT_TRUE(r.echo_only);
  EXPECT_EQ(r.generates[0].max_tokens(), 1u);

  r = ParseOk(json{{"prompt", {"a", "b"}}, {"n", 2}, {"best_of", 5}}, Endpoint::kCompletions);
  EXPECT_EQ(r.n, 2u);
  EXPECT_EQ(r.best_of, 5u);
  for (const v1::GenerateRequest& g : r.generates) {
    EXPECT_EQ(g.n(), 5u);
    EXPECT_TRUE(g.logprobs());
    EXPECT_EQ(g.top_logprobs(), 0u);
  }
  r = ParseOk(json{{"prompt", "Hi"}, {"n", 2}, {"best_of", 2}, {"stream", true}},
              Endpoint::kCompletions);
  EXPECT_EQ(r.best_of, 1u);  // best_of = n: every sequence is a choice, streaming or not
  EXPECT_FALSE(r.generates[0].logprobs());
}

// vLLM's use_beam_search: beam_search of width n (length_penalty when given), on both
// endpoints; not streamed, and n is the width (best_of only if equal to it). Without it,
// length_penalty changes nothing and is logged as ignored.
TEST(GatewayRequestMapping, BeamSearch) {
  CompletionRequest r = ParseOk(
      json{{"prompt", "Hi"}, {"use_beam_search", true}, {"n", 4}, {"length_penalty", 0.5}},
      Endpoint::kCompletions);
  ASSERT_TRUE(r.generates[0].has_beam_search());
  EXPECT_FLOAT_EQ(r.generates[0].beam_search().length_penalty(), 0.5f);
  EXPECT_EQ(r.generates[0].n(), 4u);
  EXPECT_EQ(r.n, 4u);
  EXPECT_EQ(r.best_of, 1u);
  EXPECT_FALSE(r.generates[0].logprobs());
  EXPECT_TRUE(r.ignored_fields.empty());

  const json chat = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"use_beam_search", true},
                     {"stream", false}};
  r = ParseOk(chat, Endpoint::kChatCompletions);
  ASSERT_TRUE(r.generates[0].has_beam_search());
  EXPECT_FALSE(r.generates[0].beam_search().has_length_penalty());  // the server's 1
  EXPECT_FALSE(r.generates[0].has_n());

  r = ParseOk(json{{"prompt", "Hi"}, {"use_beam_search", true}, {"n", 2}, {"best_of", 2}},
              Endpoint::kCompletions);
  EXPECT_TRUE(r.generates[0].has_beam_search());
  EXPECT_EQ(r.best_of, 1u);

  r = ParseOk(json{{"prompt", "Hi"}, {"use_beam_search", false}, {"length_penalty", 2}},
              Endpoint::kCompletions);
  EXPECT_FALSE(r.generates[0].has_beam_search());
  ASSERT_EQ(r.ignored_fields.size(), 1u);
  EXPECT_EQ(r.ignored_fields[0].name, "length_penalty");
  json chat_ignored = chat;
  chat_ignored.erase("use_beam_search");
  chat_ignored["length_penalty"] = 2;
  chat_ignored["store"] = false;
  r = ParseOk(chat_ignored, Endpoint::kChatCompletions);
  EXPECT_FALSE(r.generates[0].has_beam_search());
  ASSERT_EQ(r.ignored_fields.size(), 2u);  // both kept: the SDK fields join, not replace

  const HttpError stream = ParseError(
      json{{"prompt", "Hi"}, {"use_beam_search", true}, {"stream", true}}, Endpoint::kCompletions);
  EXPECT_EQ(stream.param, "stream");
  EXPECT_NE(stream.message.find("beam search is not streamed"), std::string::npos);
  json chat_stream = chat;
  chat_stream["stream"] = true;
  EXPECT_EQ(ParseError(chat_stream, Endpoint::kChatCompletions).param, "stream");
  const HttpError best_of =
      ParseError(json{{"prompt", "Hi"}, {"use_beam_search", true}, {"n", 2}, {"best_of", 4}},
                 Endpoint::kCompletions);
  EXPECT_EQ(best_of.param, "best_of");
  EXPECT_NE(best_of.message.find("set n"), std::string::npos) << best_of.message;
  // Lower than n too: the beam search's refusal, not best_of's own "raise best_of".
  const HttpError below = ParseError(
      json{{"prompt", "Hi"}, {"use_beam_search", true}, {"n", 3}, {"best_of", 1}},
      Endpoint::kCompletions);
  EXPECT_EQ(below.param, "best_of");
  EXPECT_NE(below.message.find("n = 3 is the beam width"), std::string::npos) << below.message;
}

TEST(GatewayRequestMapping, PromptShapes) {
  EXPECT_EQ(ParseOk(json{{"prompt", {1, 2, 3}}}, Endpoint::kCompletions)
                .generates[0]
                .token_ids()
                .ids_size(),
            3);
  const CompletionRequest several =
      ParseOk(json{{"prompt", {"a", "b"}}, {"n", 2}}, Endpoint::kCompletions);
  ASSERT_EQ(several.generates.size(), 2u);
  EXPECT_EQ(several.generates[1].text(), "b");
  EXPECT_EQ(several.generates[1].n(), 2u);
  const CompletionRequest lists =
      ParseOk(json{{"prompt", {{1, 2}, {3}}}}, Endpoint::kCompletions);
  ASSERT_EQ(lists.generates.size(), 2u);
  EXPECT_EQ(lists.generates[1].token_ids().ids(0), 3);
  EXPECT_EQ(ParseError(json{{"prompt", {1, "a"}}}, Endpoint::kCompletions).param, "prompt");
  EXPECT_EQ(ParseError(json{{"prompt", json::array()}}, Endpoint::kCompletions).param, "prompt");
  EXPECT_EQ(ParseError(json::object(), Endpoint::kCompletions).param, "prompt");
}

TEST(GatewayRequestMapping, ChatMessagesAndTools) {
  const CompletionRequest r = ParseOk(
      json::parse(R"({"messages": [
          {"role": "developer", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Hello "},
                                       {"type": "text", "text": "there"}]},
          {"role": "assistant", "content": null}],
        "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2,
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
        "stream": true, "stream_options": {"include_usage": true}})"),
      Endpoint::kChatCompletions);
  const v1::Chat& chat = r.generates[0].chat();
  ASSERT_EQ(chat.messages_size(), 3);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(1).content(), "Hello there");
  EXPECT_EQ(chat.messages(2).content(), "");
  EXPECT_EQ(json::parse(chat.tools_json())[0]["function"]["name"], "f");
  EXPECT_EQ(r.generates[0].max_tokens(), 5u);
  EXPECT_TRUE(r.generates[0].logprobs());
  EXPECT_EQ(r.generates[0].top_logprobs(), 2u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);

  const CompletionRequest none = ParseOk(
      json::parse(R"({"messages": [{"role": "user", "content": "x"}],
                      "tools": [{"type": "function", "function": {"name": "f"}}],
                      "tool_choice": "none"})"),
      Endpoint::kChatCompletions);
  EXPECT_EQ(none.generates[0].chat().tools_json(), "");  // "none": the model sees no tools
}

TEST(GatewayRequestMapping, RefusalsNameTheParameter) {
  const json chat_base = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
  struct Case {
    Endpoint endpoint;
    json body;
    std::string param;
  };
  const json completion_base = {{"prompt", "x"}};
  const std::vector<Case> cases = {
      {Endpoint::kCompletions, {{"foo", 1}}, "foo"},
      {Endpoint::kCompletions, {{"max_tokens", 1.5}}, "max_tokens"},
      {Endpoint::kCompletions, {{"n", 500}}, "n"},
      {Endpoint::kCompletions, {{"temperature", "x"}}, "temperature"},
      {Endpoint::kCompletions, {{"stop", {1}}}, "stop"},
      {Endpoint::kCompletions, {{"logit_bias", {{"-1", 1}}}}, "logit_bias"},
      {Endpoint::kCompletions, {{"best_of", 1}, {"n", 2}}, "best_of"},
      {Endpoint::kCompletions, {{"best_of", 2}, {"stream", true}}, "best_of"},
      {Endpoint::kCompletions, {{"prompt_logprobs", 21}}, "prompt_logprobs"},
      {Endpoint::kCompletions, {{"use_beam_search", 1}}, "use_beam_search"},
      {Endpoint::kCompletions, {{"length_penalty", "long"}}, "length_penalty"},
      {Endpoint::kChatCompletions, {{"use_beam_search", "yes"}}, "use_beam_search"},
      {Endpoint::kChatCompletions, {{"use_beam_search", true}, {"length_penalty", {1}}},
       "length_penalty"},
      {Endpoint::kChatCompletions, {{"use_beam_search", true}, {"best_of", 2}}, "best_of"},
      // Past float's range (the wire's type): refused, not converted.
      {Endpoint::kChatCompletions, {{"use_beam_search", true}, {"length_penalty", 1e308}},
       "length_penalty"},
      {Endpoint::kCompletions, {{"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {Endpoint::kCompletions, {{"messages", chat_base["messages"]}}, "messages"},
      {Endpoint::kChatCompletions, {{"prompt", "x"}}, "prompt"},
      {Endpoint::kChatCompletions, {{"top_logprobs", 1}}, "top_logprobs"},
      // Set at all without logprobs: 0 too, and beside logprobs: false (issue 35).
      {Endpoint::kChatCompletions, {{"top_logprobs", 0}}, "top_logprobs"},
      {Endpoint::kChatCompletions, {{"logprobs", false}, {"top_logprobs", 2}}, "top_logprobs"},
      {Endpoint::kChatCompletions, {{"max_tokens", 3}, {"max_completion_tokens", 4}},
       "max_completion_tokens"},
      {Endpoint::kChatCompletions, {{"tool_choice", "required"}}, "tool_choice"},
      {Endpoint::kChatCompletions, {{"response_format", {{"type", "json_schema"}}}},
       "response_format"},
      {Endpoint::kChatCompletions, {{"functions", json::array()}}, "functions"},
      // A "type" that is not a string once threw from json::value (found by
      // request_mapping_fuzzer): the connection dropped without a response.
      {Endpoint::kChatCompletions, {{"response_format", {{"type", json::array()}}}},
       "response_format"},
      {Endpoint::kChatCompletions, {{"response_format", {{"type", 5}}}}, "response_format"},
      {Endpoint::kChatCompletions,
       {{"messages", {{{"role", "user"}, {"content", {{{"type", {1}}, {"text", "x"}}}}}}}},
       "messages"},
  };
  for (const Case& c : cases) {
    json body = c.endpoint == Endpoint::kCompletions ? completion_base : chat_base;
    body.update(c.body);
    const HttpError error = ParseError(body, c.endpoint);
    EXPECT_EQ(error.status, 400) << body.dump();
    EXPECT_EQ(error.param, c.param) << body.dump() << ": " << error.message;
  }
  const HttpError name = ParseError(
      json::parse(R"({"messages": [{"role": "user", "content": "x", "refusal": "no"}]})"),
      Endpoint::kChatCompletions);
  EXPECT_NE(name.message.find("messages[0].refusal is not supported"), std::string::npos);
}

// Tool-call arguments are JSON inside a string, which the body's bound on nesting never sees:
// the same bound (common/json_nesting.h) refuses them, naming them, before the server copies
// and prints them recursively (100000 levels killed it, issue 35).
TEST(GatewayRequestMapping, DeepToolCallArgumentsAreRefusedNamingThem) {
  const auto body = [](const std::string& arguments) {
    return json{{"messages",
                 {{{"role", "user"}, {"content", "x"}},
                  {{"role", "assistant"},
                   {"content", nullptr},
                   {"tool_calls",
                    {{{"id", "c"},
                      {"type", "function"},
                      {"function", {{"name", "f"}, {"arguments", arguments}}}}}}}}}};
  };
  const auto nested = [](int levels) {
    return std::string(levels, '[') + std::string(levels, ']');
  };
  const auto object = [&](int levels) { return "{\"a\": " + nested(levels - 1) + "}"; };
  ParseOk(body(object(kMaxJsonNesting)), Endpoint::kChatCompletions);
  const HttpError error = ParseError(body(object(100000)), Endpoint::kChatCompletions);
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param, "messages");
  EXPECT_EQ(error.message, "messages[1].tool_calls[0].function.arguments nests deeper than 64 "
                           "levels of lists and objects");
  TokenizeCall tokenize;
  const std::optional<HttpError> refused = ParseTokenizeRequest(body(object(100000)), tokenize);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->message.find("nests deeper than 64 levels"), std::string::npos);
}

// n has one limit in the gateway and the server (common/request_limits.h), and one request's
// prompts × n stays within a batch (issue 35: 64 prompts × n = 16 took the machine).
TEST(GatewayRequestMapping, SequencesPerRequestAreCapped) {
  EXPECT_EQ(ParseError({{"prompt", "x"}, {"n", kMaxSequencesPerRequest + 1}},
                       Endpoint::kCompletions)
                .message,
            "n must be an integer in [1, 16]");
  EXPECT_EQ(ParseError({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"n", 17}},
                       Endpoint::kChatCompletions)
                .param,
            "n");
  const json prompts = std::vector<std::string>(kMaxPromptsPerRequest, "x");
  const HttpError fan_out =
      ParseError({{"prompt", prompts}, {"n", kMaxSequencesPerRequest}}, Endpoint::kCompletions);
  EXPECT_EQ(fan_out.status, 400);
  EXPECT_EQ(fan_out.param, "n");
  EXPECT_NE(fan_out.message.find("64 prompts × n = 1024 sequences; at most 256"),
            std::string::npos)
      << fan_out.message;
  // At the cap: mapped.
  EXPECT_EQ(ParseOk({{"prompt", prompts}, {"n", 4}}, Endpoint::kCompletions).generates.size(),
            64u);
}

TEST(GatewayRequestMapping, AffinityKeyFollowsTheSystemPromptOrThePromptStart) {
  const auto chat_key = [](const std::string& system, const std::string& user) {
    json messages = json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", user}});
    return ParseOk(json{{"messages", messages}}, Endpoint::kChatCompletions).affinity_key;
  };
  EXPECT_EQ(chat_key("You are a pirate.", "Hi"), chat_key("You are a pirate.", "Bye"));
  EXPECT_NE(chat_key("You are a pirate.", "Hi"), chat_key("You are a robot.", "Hi"));
  EXPECT_NE(chat_key("", "Hi"), chat_key("", "Bye"));

  const std::string shared(kAffinityPrefixChars, 'a');
  const auto prompt_key = [](const std::string& prompt) {
    return ParseOk(json{{"prompt", prompt}}, Endpoint::kCompletions).affinity_key;
  };
  EXPECT_EQ(prompt_key(shared + "tail one"), prompt_key(shared + "another tail"));
  EXPECT_NE(prompt_key("short one"), prompt_key("short two"));
}

TEST(GatewayRequestMapping, TokenizeAndDetokenize) {
  TokenizeCall tokenize;
  EXPECT_FALSE(ParseTokenizeRequest(json{{"prompt", "hi"}, {"add_special_tokens", false}},
                                    tokenize));
  EXPECT_EQ(tokenize.request.text(), "hi");
  EXPECT_FALSE(tokenize.request.add_special_tokens());
  TokenizeCall both;
  EXPECT_TRUE(ParseTokenizeRequest(
      json{{"prompt", "hi"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}, both));
  DetokenizeCall detokenize;
  EXPECT_FALSE(ParseDetokenizeRequest(json{{"tokens", {1, 2}}}, detokenize));
  EXPECT_EQ(detokenize.request.token_ids_size(), 2);
  DetokenizeCall bad;
  EXPECT_EQ(ParseDetokenizeRequest(json{{"tokens", {-1}}}, bad)->param, "tokens");
}

}  // namespace
}  // namespace tokenmill::gateway
