// Forced tool calls: the grammar tool_call_grammar writes for each family (DeepSeek's and Kimi
// K2's as their templates write calls) accepts that family's real markup around a call whose
// arguments validate, refuses other names, arguments and markup, and what it accepts parses
// back (OutputParser) into the same call.
// BuildGenerateRequest's choices around it: the parsing options, the trigger after a prompt
// that opens <think>, and the refusals.
#include "server/grpc/tool_call_grammar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/grammar_vocabulary.h"
#include "grammar/matcher.h"
#include "server/grpc/request_builder.h"
#include "tests/test_paths.h"

namespace tokenmill::server {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kTools[] = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 30},
      "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"$ref": "#/$defs/zone"}}, "required": ["zone"],
    "$defs": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}}}}}
])";

struct Served {
  Served() {
    StatusOr<GgufFile> file = GgufFile::Open(TestModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf");
    TM_CHECK(file.ok());
    StatusOr<Tokenizer> t = Tokenizer::FromGguf(*file);
    TM_CHECK(t.ok());
    tokenizer.emplace(std::move(*t));
    StatusOr<ChatTemplate> c =
        ChatTemplate::FromFile(TestDataDir() + "/chat_templates/deepseek_r1_distill.jinja", {});
    TM_CHECK(c.ok()) << c.status().ToString();
    r1_template.emplace(std::move(*c));
    StatusOr<ChatTemplate> own = ChatTemplate::FromGguf(*file);
    TM_CHECK(own.ok());
    own_template.emplace(std::move(*own));
    grammars = std::make_unique<grammar::GrammarCache>(
        grammar::VocabularyIndex::Build(GrammarVocabulary(*tokenizer)), grammar::GrammarLimits{});
  }
  RequestContext Context(ToolCallFormat format, bool r1) const {
    return {.tokenizer = &*tokenizer,
            .chat_template = r1 ? &*r1_template : &*own_template,
            .max_model_len = 2048,
            .grammars = grammars.get(),
            .tool_call_format = format,
            .reasoning = r1};
  }
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> r1_template;
  std::optional<ChatTemplate> own_template;
  std::unique_ptr<grammar::GrammarCache> grammars;
};

const Served& Smol() {
  static const Served served;
  return served;
}

bool Accepts(ToolCallFormat format, std::string_view function, bool parallel,
             const std::string& output) {
  StatusOr<std::string> gbnf =
      ForcedToolCallGbnf(format, kTools, function, parallel, grammar::GrammarLimits{});
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().ToString();
  auto compiled = Smol().grammars->GetOrCompile({.kind = grammar::GrammarSpec::Kind::kGbnf,
                                                 .text = *gbnf, .choices = {}});
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString() << "\n" << *gbnf;
  grammar::GrammarMatcher matcher(*compiled);
  return matcher.AcceptBytes(output) && matcher.CanTerminate();
}

struct FamilyCase {
  ToolCallFormat format;
  std::string one_call;   // get_weather(Paris, celsius) in the family's markup
  std::string two_calls;  // then get_time(Europe/Paris)
};

const std::vector<FamilyCase>& Families() {
  static const std::vector<FamilyCase> cases = {
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
       "{\"zone\": \"Europe/Paris\"}}\n</tool_call>"},
      {ToolCallFormat::kLlama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}; {\"name\": \"get_time\", \"parameters\": {\"zone\": \"Europe/Paris\"}}"},
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}, {\"name\": \"get_time\", \"arguments\": {\"zone\": \"Europe/Paris\"}}]"},
      {ToolCallFormat::kMistralV11,
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}",
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}"
       "[TOOL_CALLS]get_time[ARGS]{\"zone\": \"Europe/Paris\"}"},
      {ToolCallFormat::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜>\n"
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"zone\": \"Europe/Paris\"}"
       "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::kDeepSeekV31,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", "
       "\"unit\": \"celsius\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", "
       "\"unit\": \"celsius\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"
       "{\"zone\": \"Europe/Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"unit\": \"celsius\"}"
       "<|tool_call_end|><|tool_calls_section_end|>",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"unit\": \"celsius\"}"
       "<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>"
       "{\"zone\": \"Europe/Paris\"}<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolCallFormat::kJson,
       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}",
       "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}, {\"name\": \"get_time\", \"arguments\": {\"zone\": \"Europe/Paris\"}}]"},
  };
  return cases;
}

TEST(ForcedToolCallGbnf, AcceptsEachFamilysMarkupAndParsesBack) {
  for (const FamilyCase& f : Families()) {
    SCOPED_TRACE(std::string(ToolCallFormatName(f.format)));
    EXPECT_TRUE(Accepts(f.format, "", /*parallel=*/false, f.one_call));
    EXPECT_TRUE(Accepts(f.format, "get_weather", false, f.one_call));
    EXPECT_FALSE(Accepts(f.format, "get_time", false, f.one_call));  // not the named one
    EXPECT_FALSE(Accepts(f.format, "", false, f.two_calls));         // one call only
    if (f.format != ToolCallFormat::kJson) {
      EXPECT_TRUE(Accepts(f.format, "", /*parallel=*/true, f.one_call));
    }
    EXPECT_TRUE(Accepts(f.format, "", true, f.two_calls));
    // What the grammar accepts, the family's parser reads back.
    OutputParser parser({.tool_calls = f.format, .reasoning = false,
                         .starts_in_reasoning = false, .parallel = true, .seed = 1});
    ParsedOutput out = parser.Feed(f.two_calls);
    out.Append(parser.Finish());
    EXPECT_EQ(out.content, "");
    ASSERT_EQ(out.tool_calls.size(), 4u);  // per call: id and name, then its arguments
    EXPECT_EQ(out.tool_calls[0].name, "get_weather");
    EXPECT_EQ(Json::parse(out.tool_calls[1].arguments),
              Json::parse(R"({"city": "Paris", "unit": "celsius"})"));
    EXPECT_EQ(out.tool_calls[2].name, "get_time");
  }
}

TEST(ForcedToolCallGbnf, ArgumentsFollowTheParameters) {
  const auto hermes = [](const std::string& arguments) {
    return "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + arguments +
           "}\n</tool_call>";
  };
  EXPECT_TRUE(Accepts(ToolCallFormat::kHermes, "", false,
                      hermes(R"({"city": "Oslo", "unit": "fahrenheit"})")));
  EXPECT_FALSE(Accepts(ToolCallFormat::kHermes, "", false, hermes(R"({"city": "Oslo"})")));
  EXPECT_FALSE(Accepts(ToolCallFormat::kHermes, "", false,
                       hermes(R"({"city": "Oslo", "unit": "kelvin"})")));
  EXPECT_FALSE(Accepts(ToolCallFormat::kHermes, "", false,
                       hermes(R"({"city": "Oslo", "unit": "celsius", "x": 1})")));
  // get_time's $defs moved to the document's root: its pattern holds.
  EXPECT_FALSE(Accepts(ToolCallFormat::kHermes, "get_time", false,
                       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": "
                       "\"paris\"}}\n</tool_call>"));
}

TEST(ForcedToolCallGbnf, RefusesWhatCannotBeForced) {
  const grammar::GrammarLimits limits;
  EXPECT_THAT(ForcedToolCallGbnf(ToolCallFormat::kHermes, kTools, "nope", false, limits)
                  .status()
                  .message(),
              HasSubstr("'nope', which is not in chat.tools_json"));
  EXPECT_THAT(ForcedToolCallGbnf(ToolCallFormat::kHermes, "[]", "", false, limits)
                  .status()
                  .message(),
              HasSubstr("give chat.tools_json"));
  const std::string bad_schema =
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"a": {"type": "string", "frobnicate": 1}}}}}])";
  const Status status =
      ForcedToolCallGbnf(ToolCallFormat::kHermes, bad_schema, "", false, limits).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("frobnicate"));
}

// gpt-oss: one call a turn, as a commentary message to functions.NAME constrained to JSON,
// ended by <|call|>; what the grammar accepts, HarmonyParser reads back as that call.
TEST(ForcedToolCallGbnf, HarmonyForcesOneCommentaryMessageToTheFunction) {
  const auto call = [](std::string_view name, std::string_view arguments) {
    return "<|channel|>commentary to=functions." + std::string(name) +
           " <|constrain|>json<|message|>" + std::string(arguments) + "<|call|>";
  };
  const std::string weather = call("get_weather", R"({"city": "Paris", "unit": "celsius"})");
  const std::string time = call("get_time", R"({"zone": "Europe/Paris"})");
  for (const bool parallel : {false, true}) {
    EXPECT_TRUE(Accepts(ToolCallFormat::kHarmony, "", parallel, weather));
    EXPECT_TRUE(Accepts(ToolCallFormat::kHarmony, "", parallel, time));
    EXPECT_FALSE(Accepts(ToolCallFormat::kHarmony, "", parallel,
                         weather + "<|start|>assistant" + time));  // <|call|> ends the turn
  }
  EXPECT_TRUE(Accepts(ToolCallFormat::kHarmony, "get_weather", false, weather));
  EXPECT_FALSE(Accepts(ToolCallFormat::kHarmony, "get_time", false, weather));
  EXPECT_FALSE(Accepts(ToolCallFormat::kHarmony, "", false,
                       call("get_weather", R"({"city": "Paris", "unit": "kelvin"})")));
  EXPECT_FALSE(Accepts(ToolCallFormat::kHarmony, "", false,  // no analysis before the call
                       "<|channel|>analysis<|message|>Let me look.<|end|><|start|>assistant" +
                           weather));
  EXPECT_FALSE(Accepts(ToolCallFormat::kHarmony, "", false,
                       weather.substr(0, weather.size() - 8)));  // unfinished: no <|call|>

  OutputParser parser({.tool_calls = ToolCallFormat::kHarmony, .reasoning = true,
                       .starts_in_reasoning = false, .harmony = true, .parallel = true,
                       .seed = 1});
  ParsedOutput out = parser.Feed(weather);
  out.Append(parser.Finish());
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(out.reasoning, "");
  ASSERT_EQ(out.tool_calls.size(), 2u);  // id and name, then the arguments
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(out.tool_calls[1].arguments),
            Json::parse(R"({"city": "Paris", "unit": "celsius"})"));
}

// DeepSeek's and Kimi's markers are control tokens in their vocabularies: the grammar spells
// them in text, which the parsers read. Kimi's id must carry the index the model writes.
TEST(ForcedToolCallGbnf, SectionFormatsNeedTheirWholeMarkup) {
  const std::string arguments = R"({"city": "Paris", "unit": "celsius"})";
  const auto kimi = [&](std::string_view id) {
    return "<|tool_calls_section_begin|><|tool_call_begin|>" + std::string(id) +
           "<|tool_call_argument_begin|>" + arguments +
           "<|tool_call_end|><|tool_calls_section_end|>";
  };
  EXPECT_TRUE(Accepts(ToolCallFormat::kKimiK2, "", false, kimi("functions.get_weather:12")));
  EXPECT_FALSE(Accepts(ToolCallFormat::kKimiK2, "", false, kimi("functions.get_weather:")));
  EXPECT_FALSE(Accepts(ToolCallFormat::kKimiK2, "", false, kimi("get_weather:0")));
  // The forms are apart: V3's fenced call is no V3.1 call, nor the other way round.
  const std::string v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" +
                          arguments + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  EXPECT_TRUE(Accepts(ToolCallFormat::kDeepSeekV31, "", true, v31));
  EXPECT_FALSE(Accepts(ToolCallFormat::kDeepSeekV3, "", true, v31));
  EXPECT_FALSE(Accepts(ToolCallFormat::kDeepSeekV31, "", true,  // the section must end
                       v31.substr(0, v31.size() - std::string("<｜tool▁calls▁end｜>").size())));
  // What is forced parses back with the model's id, under reasoning that ended first.
  OutputParser parser({.tool_calls = ToolCallFormat::kKimiK2, .reasoning = true,
                       .starts_in_reasoning = false, .parallel = true, .seed = 1});
  ParsedOutput out = parser.Feed("<think>Paris, then.</think>" + kimi("functions.get_weather:3"));
  out.Append(parser.Finish());
  EXPECT_EQ(out.reasoning, "Paris, then.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].id, "functions.get_weather:3");
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
}

v1::GenerateRequest ChatRequest(bool forced) {
  v1::GenerateRequest request;
  v1::ChatMessage& m = *request.mutable_chat()->add_messages();
  m.set_role("user");
  m.set_content("Weather in Paris?");
  request.mutable_chat()->set_tools_json(kTools);
  if (forced) {
    request.mutable_chat()->mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_MODE_REQUIRED);
  }
  request.set_max_tokens(64);
  return request;
}

TEST(BuildGenerateRequest, ForcedCallsAndParsingOptions) {
  std::optional<OutputParserOptions> parsing;
  // auto: parsed, not constrained.
  StatusOr<ValidatedRequest> built = BuildGenerateRequest(
      ChatRequest(false), Smol().Context(ToolCallFormat::kHermes, false));
  if (built.ok()) parsing = built->get().output_parsing;
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_EQ(built->get().grammar, nullptr);
  ASSERT_TRUE(parsing.has_value());
  EXPECT_EQ(parsing->tool_calls, ToolCallFormat::kHermes);
  EXPECT_FALSE(parsing->reasoning);
  EXPECT_FALSE(CompilesGrammar(ChatRequest(false)));

  // required: a grammar, built off the gRPC threads.
  EXPECT_TRUE(CompilesGrammar(ChatRequest(true)));
  built = BuildGenerateRequest(ChatRequest(true), Smol().Context(ToolCallFormat::kHermes, false));
  if (built.ok()) parsing = built->get().output_parsing;
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_NE(built->get().grammar, nullptr);
  EXPECT_TRUE(built->get().grammar_starts_after.empty());

  // The R1 template opens <think> in the prompt: reasoning first, the grammar after </think>.
  built = BuildGenerateRequest(ChatRequest(true), Smol().Context(ToolCallFormat::kHermes, true));
  if (built.ok()) parsing = built->get().output_parsing;
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ASSERT_TRUE(parsing.has_value());
  EXPECT_TRUE(parsing->starts_in_reasoning);
  EXPECT_EQ(Smol().tokenizer->Decode(built->get().grammar_starts_after), "</think>");
  EXPECT_TRUE(built->get().grammar_reasoning_opens.empty());

  // A reasoning model whose template leaves <think> to it (Qwen3): the output may open it.
  RequestContext opens_itself = Smol().Context(ToolCallFormat::kHermes, false);
  opens_itself.reasoning = true;
  built = BuildGenerateRequest(ChatRequest(true), opens_itself);
  if (built.ok()) parsing = built->get().output_parsing;
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ASSERT_TRUE(parsing.has_value());
  EXPECT_FALSE(parsing->starts_in_reasoning);
  EXPECT_EQ(Smol().tokenizer->Decode(built->get().grammar_starts_after), "</think>");
  EXPECT_EQ(Smol().tokenizer->Decode(built->get().grammar_reasoning_opens), "<think>");

  // tool_choice none: no tools in the prompt, nothing parsed.
  v1::GenerateRequest none = ChatRequest(false);
  none.mutable_chat()->mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_MODE_NONE);
  built = BuildGenerateRequest(none, Smol().Context(ToolCallFormat::kHermes, false));
  if (built.ok()) parsing = built->get().output_parsing;
  ASSERT_TRUE(built.ok());
  EXPECT_FALSE(parsing.has_value());
}

TEST(BuildGenerateRequest, RefusesForcedCallsThatCannotWork) {
  const auto refused = [](v1::GenerateRequest request, std::optional<ToolCallFormat> format) {
    RequestContext context = Smol().Context(ToolCallFormat::kHermes, false);
    context.tool_call_format = format;
    StatusOr<ValidatedRequest> built = BuildGenerateRequest(request, context);
    EXPECT_EQ(built.status().code(), StatusCode::kInvalidArgument);
    return built.status().message();
  };
  v1::GenerateRequest no_tools = ChatRequest(true);
  no_tools.mutable_chat()->clear_tools_json();
  EXPECT_THAT(refused(no_tools, ToolCallFormat::kHermes), HasSubstr("has no tools"));
  EXPECT_THAT(refused(ChatRequest(true), std::nullopt), HasSubstr("--tool-call-parser none"));
  v1::GenerateRequest both = ChatRequest(true);
  both.mutable_sampling()->set_regex("a");
  EXPECT_THAT(refused(both, ToolCallFormat::kHermes), HasSubstr("structured_output"));
  v1::GenerateRequest named = ChatRequest(false);
  named.mutable_chat()->mutable_tool_choice()->set_function_name("nope");
  EXPECT_THAT(refused(named, ToolCallFormat::kHermes), HasSubstr("'nope'"));
  v1::GenerateRequest bad_arguments = ChatRequest(false);
  v1::ChatMessage& m = *bad_arguments.mutable_chat()->add_messages();
  m.set_role("assistant");
  v1::ToolCall& call = *m.add_tool_calls();
  call.set_id("call_1");
  call.set_name("get_weather");
  call.set_arguments("[1, 2]");
  EXPECT_THAT(refused(bad_arguments, ToolCallFormat::kHermes),
              HasSubstr("chat.messages[1].tool_calls[0].arguments must be a JSON object"));
}

}  // namespace
}  // namespace tokenmill::server
