// The chat completions fields SDKs and frameworks send (gateway/api/openai/sdk_fields.h):
// accepted and ignored, honoured, or refused naming the field; the once-per-gateway log of
// the ignored ones; /tokenize's chat fields; Anthropic's tool_use ids; a prompt past the
// context as OpenAI's context_length_exceeded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/api/anthropic/anthropic_messages.h"
#include "gateway/api/ignored_fields.h"
#include "gateway/api/openai/request_mapping.h"
#include "gateway/http/http_error.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

json Chat(json extra) {
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  body.update(extra);
  return body;
}

CompletionRequest ParseOk(const json& body) {
  CompletionRequest out;
  const std::optional<HttpError> error =
      ParseCompletionRequest(body, Endpoint::kChatCompletions, out);
  EXPECT_FALSE(error.has_value()) << (error ? error->message : "");
  return out;
}

HttpError ParseError(const json& body) {
  CompletionRequest out;
  std::optional<HttpError> error = ParseCompletionRequest(body, Endpoint::kChatCompletions, out);
  EXPECT_TRUE(error.has_value()) << body.dump();
  return error.value_or(HttpError{});
}

std::vector<std::string> IgnoredNames(const CompletionRequest& r) {
  std::vector<std::string> names;
  for (const IgnoredField& field : r.ignored_fields) names.emplace_back(field.name);
  return names;
}

TEST(SdkFields, FieldsThatCannotApplyAreAcceptedAndListedAsIgnored) {
  const CompletionRequest plain = ParseOk(Chat(json::object()));
  const CompletionRequest r = ParseOk(Chat(
      {{"service_tier", "auto"}, {"store", false}, {"metadata", {{"run", "7"}}},
       {"safety_identifier", "user-42"}, {"verbosity", "low"}, {"modalities", {"text"}}}));
  EXPECT_EQ(IgnoredNames(r), (std::vector<std::string>{"service_tier", "store", "metadata",
                                                       "safety_identifier", "verbosity",
                                                       "modalities"}));
  for (const IgnoredField& field : r.ignored_fields) EXPECT_FALSE(field.why.empty());
  // Nothing else changes: the Generate request is the one without them.
  ASSERT_EQ(r.generates.size(), 1u);
  EXPECT_EQ(r.generates[0].SerializeAsString(), plain.generates[0].SerializeAsString());
  EXPECT_EQ(r.affinity_key, plain.affinity_key);
  EXPECT_TRUE(plain.ignored_fields.empty());
  // null is "not sent", as everywhere in OpenAI's API.
  EXPECT_TRUE(
      ParseOk(Chat({{"service_tier", nullptr}, {"metadata", nullptr}})).ignored_fields.empty());
}

TEST(SdkFields, BadValuesAreRefusedNamingTheField) {
  struct Case {
    json extra;
    std::string param;
    std::string words;
  };
  const std::vector<Case> cases = {
      {{{"verbosity", "loud"}}, "verbosity", "verbosity 'loud' is not one of low, medium, high"},
      {{{"verbosity", 1}}, "verbosity", "verbosity must be a string"},
      {{{"modalities", {"text", "audio"}}}, "modalities", "only text is served"},
      {{{"modalities", "text"}}, "modalities", "modalities must be a list"},
      {{{"modalities", {"image"}}}, "modalities", "\"text\" only, got \"image\""},
      {{{"service_tier", "flex"}}, "service_tier", "not one of auto, default"},
      {{{"store", "yes"}}, "store", "store must be true or false"},
      {{{"metadata", {{"n", 1}}}}, "metadata", "metadata.n must be a string"},
      {{{"metadata", "x"}}, "metadata", "metadata must be an object"},
      {{{"safety_identifier", 5}}, "safety_identifier", "must be a string"},
      {{{"prompt_cache_key", 5}}, "prompt_cache_key", "must be a string"},
      {{{"reasoning_effort", "extreme"}}, "reasoning_effort", "not one of low, medium, high"},
      {{{"continue_final_message", "yes"}}, "continue_final_message", "true or false"},
      {{{"continue_final_message", true}, {"add_generation_prompt", true}},
       "continue_final_message", "cannot both be true"},
  };
  for (const Case& c : cases) {
    const HttpError error = ParseError(Chat(c.extra));
    EXPECT_EQ(error.status, 400);
    EXPECT_EQ(error.param, c.param) << c.extra.dump();
    EXPECT_NE(error.message.find(c.words), std::string::npos) << error.message;
  }
}

TEST(SdkFields, FieldsStayUnknownToCompletions) {
  CompletionRequest out;
  const std::optional<HttpError> error = ParseCompletionRequest(
      {{"prompt", "x"}, {"reasoning_effort", "low"}}, Endpoint::kCompletions, out);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "reasoning_effort");
}

TEST(SdkFields, ReasoningEffortIsATemplateVariableThatChatTemplateKwargsOverrides) {
  const auto kwargs = [](const json& extra) {
    const std::string text = ParseOk(Chat(extra)).generates[0].chat().template_kwargs_json();
    return text.empty() ? json() : json::parse(text);
  };
  EXPECT_EQ(kwargs({{"reasoning_effort", "high"}}), json({{"reasoning_effort", "high"}}));
  EXPECT_EQ(kwargs({{"reasoning_effort", "low"},
                    {"chat_template_kwargs", {{"enable_thinking", true}}}}),
            json({{"enable_thinking", true}, {"reasoning_effort", "low"}}));
  // The explicit template variable wins, as in vLLM.
  EXPECT_EQ(kwargs({{"reasoning_effort", "high"},
                    {"chat_template_kwargs", {{"reasoning_effort", "low"}}}}),
            json({{"reasoning_effort", "low"}}));
  EXPECT_TRUE(kwargs({{"reasoning_effort", nullptr}}).is_null());
}

TEST(SdkFields, PromptCacheKeyIsTheAffinityKey) {
  const auto system = [](const std::string& text, json extra) {
    json body = Chat(std::move(extra));
    body["messages"] = {{{"role", "system"}, {"content", text}},
                        {{"role", "user"}, {"content", "Hi"}}};
    return ParseOk(body).affinity_key;
  };
  EXPECT_NE(system("You are A.", json::object()), system("You are B.", json::object()));
  EXPECT_EQ(system("You are A.", {{"prompt_cache_key", "k1"}}),
            system("You are B.", {{"prompt_cache_key", "k1"}}));
  EXPECT_NE(system("You are A.", {{"prompt_cache_key", "k1"}}),
            system("You are A.", {{"prompt_cache_key", "k2"}}));
  // The Responses API's key for the same prompt_cache_key: one cache across both APIs.
  EXPECT_EQ(system("You are A.", {{"prompt_cache_key", "k1"}}), "cache_key:k1");
}

TEST(SdkFields, ContinueFinalMessageReachesTheChat) {
  json body = Chat({{"continue_final_message", true}, {"add_generation_prompt", false}});
  body["messages"].push_back({{"role", "assistant"}, {"content", "The capital is"}});
  const auto parsed = ParseOk(body);  // kept: chat refers into it
  const v1::Chat& chat = parsed.generates[0].chat();
  EXPECT_TRUE(chat.continue_final_message());
  EXPECT_FALSE(chat.add_generation_prompt());
  // Unset add_generation_prompt is not true: the server leaves the prompt open.
  body.erase("add_generation_prompt");
  EXPECT_TRUE(ParseOk(body).generates[0].chat().continue_final_message());
  EXPECT_FALSE(ParseOk(Chat(json::object())).generates[0].chat().continue_final_message());
}

TEST(SdkFields, PredictionBecomesTheGenerateRequestsPrediction) {
  EXPECT_EQ(ParseOk(Chat({{"prediction", {{"type", "content"}, {"content", "def f(): pass"}}}}))
                .generates[0]
                .prediction(),
            "def f(): pass");
  const json parts = {{{"type", "text"}, {"text", "def f(): "}},
                      {{"type", "text"}, {"text", "pass"}}};
  EXPECT_EQ(ParseOk(Chat({{"prediction", {{"type", "content"}, {"content", parts}}}}))
                .generates[0]
                .prediction(),
            "def f(): pass");
  EXPECT_EQ(ParseOk(Chat(json::object())).generates[0].prediction(), "");
  for (const json& bad : {json("x"), json({{"type", "text"}, {"content", "x"}}),
                          json({{"type", "content"}}), json({{"type", "content"}, {"content", 5}}),
                          json({{"type", "content"}, {"content", "x"}, {"extra", 1}}),
                          json({{"type", "content"}, {"content", {{{"type", "image"}}}}})}) {
    const HttpError error = ParseError(Chat({{"prediction", bad}}));
    EXPECT_EQ(error.param, "prediction") << bad.dump();
  }
}

TEST(IgnoredFieldLog, LogsEachFieldOncePerRoute) {
  IgnoredFieldLog log;
  const IgnoredField tier{"service_tier", "no tiers"};
  const IgnoredField store{"store", "not stored"};
  EXPECT_TRUE(log.Note("chat completions", tier));
  EXPECT_FALSE(log.Note("chat completions", tier));
  EXPECT_TRUE(log.Note("chat completions", store));
  EXPECT_TRUE(log.Note("completions", tier));
  EXPECT_FALSE(log.Note("chat completions", store));
}

TEST(TokenizeChat, TakesToolsTemplateKwargsAndContinueFinalMessage) {
  TokenizeCall call;
  const json tools = json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  ASSERT_FALSE(ParseTokenizeRequest(
      {{"messages", {{{"role", "user"}, {"content", "Hi"}},
                     {{"role", "assistant"}, {"content", "Hel"}}}},
       {"tools", tools}, {"chat_template_kwargs", {{"x", 1}}},
       {"continue_final_message", true}, {"add_generation_prompt", false}},
      call));
  const v1::Chat& chat = call.request.chat();
  EXPECT_EQ(json::parse(chat.tools_json()), tools);
  EXPECT_EQ(json::parse(chat.template_kwargs_json()), json({{"x", 1}}));
  EXPECT_TRUE(chat.continue_final_message());

  TokenizeCall bad;
  std::optional<HttpError> error =
      ParseTokenizeRequest({{"prompt", "Hi"}, {"tools", tools}}, bad);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "tools");
  EXPECT_NE(error->message.find("applies to messages"), std::string::npos);
  error = ParseTokenizeRequest({{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                {"tools", {{"type", "retrieval"}}}},
                               bad);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "tools");
}

TEST(AnthropicToolUseIds, StartWithTooluAndMistralsAndKimisComeBack) {
  EXPECT_EQ(ToolUseId("call_abcdefghijklmnopqrstuvwx"), "toolu_abcdefghijklmnopqrstuvwx");
  EXPECT_EQ(ToolUseId("abcdefghi"), "toolu_abcdefghi");  // Mistral's nine letters
  EXPECT_EQ(CallIdOfToolUse("toolu_abcdefghi"), "abcdefghi");
  EXPECT_EQ(CallIdOfToolUse("toolu_abcdefghijklmnopqrstuvwx"), "toolu_abcdefghijklmnopqrstuvwx");
  EXPECT_EQ(CallIdOfToolUse("toolu_1"), "toolu_1");
  EXPECT_EQ(CallIdOfToolUse("call_1"), "call_1");
  // Kimi K2's functions.NAME:IDX, which its template writes back verbatim.
  EXPECT_EQ(ToolUseId("functions.get_weather:0"), "toolu_functions.get_weather:0");
  EXPECT_EQ(CallIdOfToolUse("toolu_functions.get_weather:0"), "functions.get_weather:0");
}

TEST(ContextLengthExceeded, OutOfRangeFromTheServerCarriesOpenAIsCode) {
  const HttpError past = FromGrpcStatus(grpc::Status(
      grpc::StatusCode::OUT_OF_RANGE, "the prompt is 9000 tokens; this server's limit is 8192"));
  EXPECT_EQ(past.status, 400);
  EXPECT_EQ(past.type, "invalid_request_error");
  EXPECT_EQ(past.code, "context_length_exceeded");
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "top_p: bad")).code,
            "");
}

}  // namespace
}  // namespace tokenmill::gateway
