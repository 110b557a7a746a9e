// The output parsers on transcripts in each family's own format (from the model cards' and
// vLLM's examples of Qwen2.5, Qwen3, Hermes 2 Pro, Llama 3.1/3.2, Mistral 7B v0.3 and
// DeepSeek-R1 distills, OpenAI's harmony guide for gpt-oss, and DeepSeek's and Kimi K2's
// templates' markup), fed whole, split at every position, and one byte at a time.
#include "text/chat/output_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_paths.h"
#include "text/chat/chat_template.h"

namespace tokenmill {
namespace {

using Json = nlohmann::json;

struct Call {
  std::string name;
  Json arguments;
};

struct Turn {
  std::string content;
  std::string reasoning;
  std::vector<Call> calls;
  std::vector<std::string> ids;
};

// Assembles the deltas as a client does, checking their order on the way: a call's first
// delta has its id and name and comes before its fragments; indices count up from 0.
Turn Assemble(const std::vector<ParsedOutput>& pieces) {
  Turn turn;
  std::vector<std::string> arguments;
  for (const ParsedOutput& piece : pieces) {
    turn.content += piece.content;
    turn.reasoning += piece.reasoning;
    for (const ToolCallDelta& delta : piece.tool_calls) {
      if (!delta.id.empty()) {
        EXPECT_EQ(delta.index, static_cast<int>(turn.calls.size()));
        EXPECT_FALSE(delta.name.empty());
        turn.calls.push_back({delta.name, nullptr});
        turn.ids.push_back(delta.id);
        arguments.emplace_back();
      } else {
        EXPECT_TRUE(delta.name.empty());
        EXPECT_EQ(delta.index + 1, static_cast<int>(turn.calls.size()));
      }
      arguments.back() += delta.arguments;
    }
  }
  for (size_t i = 0; i < turn.calls.size(); ++i) {
    turn.calls[i].arguments = Json::parse(arguments[i], nullptr, false);
    EXPECT_TRUE(turn.calls[i].arguments.is_object()) << arguments[i];
  }
  return turn;
}

Turn Parse(const OutputParserOptions& options, const std::vector<std::string>& pieces) {
  OutputParser parser(options);
  std::vector<ParsedOutput> outputs;
  for (const std::string& piece : pieces) outputs.push_back(parser.Feed(piece));
  outputs.push_back(parser.Finish());
  return Assemble(outputs);
}

void ExpectSame(const Turn& got, const Turn& want, const std::string& how) {
  EXPECT_EQ(got.content, want.content) << how;
  EXPECT_EQ(got.reasoning, want.reasoning) << how;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << how;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << how;
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << how;
  }
}

// The same turn however the output is cut into pieces.
void ExpectTurn(const OutputParserOptions& options, const std::string& output, const Turn& want) {
  ExpectSame(Parse(options, {output}), want, "whole");
  for (size_t cut = 1; cut < output.size(); ++cut) {
    ExpectSame(Parse(options, {output.substr(0, cut), output.substr(cut)}), want,
               "split at " + std::to_string(cut));
  }
  std::vector<std::string> bytes;
  for (const char c : output) bytes.emplace_back(1, c);
  ExpectSame(Parse(options, bytes), want, "byte by byte");
}

OutputParserOptions Tools(ToolCallFormat format) {
  return {.tool_calls = format, .reasoning = false, .starts_in_reasoning = false, .seed = 7};
}

TEST(OutputParserTest, QwenParallelCalls) {
  // Qwen2.5's function-calling example (Hermes markup).
  const std::string output =
      "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
      "\"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", "
      "\"date\": \"2024-10-01\"}}\n</tool_call>";
  ExpectTurn(Tools(ToolCallFormat::kHermes), output,
             {"", "",
              {{"get_current_temperature", {{"location", "San Francisco, CA, USA"}}},
               {"get_temperature_date",
                {{"location", "San Francisco, CA, USA"}, {"date", "2024-10-01"}}}},
              {}});
}

TEST(OutputParserTest, HermesTextBeforeTheCall) {
  const std::string output =
      "Let me look that up for you.\n<tool_call>\n{\"arguments\": {\"symbol\": \"TSLA\"}, "
      "\"name\": \"get_stock_fundamentals\"}\n</tool_call>\n";
  ExpectTurn(Tools(ToolCallFormat::kHermes), output,
             {"Let me look that up for you.", "",
              {{"get_stock_fundamentals", {{"symbol", "TSLA"}}}}, {}});
}

// A model can be made to write any JSON: a call nested deeper than client JSON may be
// (common/json_nesting.h) stays text, not parsed and printed recursively (issue 35). With the
// arguments before the name the call is parsed whole (with the name first they stream as text).
TEST(OutputParserTest, HermesCallNestedTooDeepStaysText) {
  const int levels = 100000;
  std::string arguments;
  for (int i = 0; i < levels; ++i) arguments += "{\"a\":";
  arguments += "1" + std::string(levels, '}');
  const std::string output =
      "<tool_call>\n{\"arguments\": " + arguments + ", \"name\": \"f\"}\n</tool_call>";
  const Turn turn = Parse(Tools(ToolCallFormat::kHermes), {output});
  EXPECT_TRUE(turn.calls.empty());
  EXPECT_NE(turn.content.find("{\"a\":{\"a\":"), std::string::npos);
}

// Qwen2.5-Coder-1.5B-Instruct's calls on tool_choice auto (scripts/serve's default model, at
// temperature 0 on its own template): never tagged, the object in a ```json fence or with the
// doubled braces of its template's example.
TEST(OutputParserTest, HermesCallsWithoutTheirTags) {
  const Turn locker = {"", "", {{"lookup_locker_code", {{"employee", "Alice"}}}}, {}};
  ExpectTurn(Tools(ToolCallFormat::kHermes),
             "```json\n{\n  \"name\": \"lookup_locker_code\",\n  \"arguments\": {\n    "
             "\"employee\": \"Alice\"\n  }\n}\n```",
             locker);
  ExpectTurn(Tools(ToolCallFormat::kHermes),
             "{{\"name\": \"lookup_locker_code\", \"arguments\": {\"employee\": \"Alice\"}}}",
             locker);
  ExpectTurn(Tools(ToolCallFormat::kHermes),
             "\n{\"name\": \"lookup_locker_code\", \"arguments\": {\"employee\": \"Alice\"}}\n",
             locker);
  ExpectTurn(Tools(ToolCallFormat::kHermes),
             "```\n{{\"arguments\": {\"employee\": \"Alice\"}, \"name\": \"lookup_locker_code\"}}"
             "\n```\n",
             locker);
}

// What only looks like the start of an untagged call is the answer, whole and in order.
TEST(OutputParserTest, HermesUntaggedLookalikesStayText) {
  for (const std::string output :
       {"```python\nprint({\"name\": \"f\", \"arguments\": {}})\n```",
        "```json\n{\"city\": \"Paris\"}\n```\nThat is the object.", "```json\nnot json\n```",
        "{{user}} is a placeholder.", "{\"name\": \"f\", \"args\": {}}", "``inline``",
        "Call it as {\"name\": \"f\", \"arguments\": {}}.", "```", "{"}) {
    ExpectTurn(Tools(ToolCallFormat::kHermes), output, {output, "", {}, {}});
  }
}

TEST(OutputParserTest, QwenThreeThinksThenCalls) {
  OutputParserOptions options = Tools(ToolCallFormat::kHermes);
  options.reasoning = true;
  const std::string output =
      "<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"celsius\"}}\n</tool_call>";
  ExpectTurn(options, output,
             {"", "\nThe user wants the weather in Paris. I should call get_weather.\n",
              {{"get_weather", {{"city", "Paris"}, {"unit", "celsius"}}}}, {}});
}

TEST(OutputParserTest, Llama31JsonAndPythonTag) {
  const Turn want{"", "",
                  {{"get_current_conditions",
                    {{"location", "San Francisco, CA"}, {"unit", "Fahrenheit"}}}},
                  {}};
  ExpectTurn(Tools(ToolCallFormat::kLlama3Json),
             "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San "
             "Francisco, CA\", \"unit\": \"Fahrenheit\"}}",
             want);
  ExpectTurn(Tools(ToolCallFormat::kLlama3Json),
             "<|python_tag|>{\"name\": \"get_current_conditions\", \"parameters\": "
             "{\"location\": \"San Francisco, CA\", \"unit\": \"Fahrenheit\"}}",
             want);
}

TEST(OutputParserTest, Llama32SemicolonSeparatedCalls) {
  ExpectTurn(Tools(ToolCallFormat::kLlama3Json),
             "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", "
             "\"parameters\": {\"city\": \"Oslo\", \"days\": [1, 2]}}",
             {"", "",
              {{"get_time", Json::object()},
               {"get_weather", {{"city", "Oslo"}, {"days", {1, 2}}}}},
              {}});
}

TEST(OutputParserTest, MistralListAndIds) {
  const std::string output =
      "[TOOL_CALLS] [{\"name\": \"get_current_weather\", \"arguments\": {\"location\": "
      "\"Paris, France\", \"format\": \"celsius\"}}, {\"name\": \"get_time\", \"arguments\": "
      "{\"zone\": \"CET\"}}]";
  ExpectTurn(Tools(ToolCallFormat::kMistral), output,
             {"", "",
              {{"get_current_weather", {{"location", "Paris, France"}, {"format", "celsius"}}},
               {"get_time", {{"zone", "CET"}}}},
              {}});
  const Turn turn = Parse(Tools(ToolCallFormat::kMistral), {output});
  for (const std::string& id : turn.ids) {
    EXPECT_TRUE(std::regex_match(id, std::regex("[A-Za-z0-9]{9}"))) << id;
  }
  const Turn hermes = Parse(Tools(ToolCallFormat::kHermes),
                            {"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"});
  ASSERT_EQ(hermes.ids.size(), 1u);
  EXPECT_TRUE(std::regex_match(hermes.ids[0], std::regex("call_[A-Za-z0-9]{24}")));
}

TEST(OutputParserTest, MistralV11NamedCalls) {
  // Mistral Small 3.2 / Magistral / Devstral templates (v11+): the name outside the JSON,
  // each call with its own [TOOL_CALLS].
  ExpectTurn(Tools(ToolCallFormat::kMistralV11),
             "I will check.[TOOL_CALLS]get_current_weather[ARGS]{\"location\": \"Paris, "
             "France\", \"format\": \"celsius\"}[TOOL_CALLS]get_time[ARGS]{\"zone\": \"CET\"}",
             {"I will check.", "",
              {{"get_current_weather", {{"location", "Paris, France"}, {"format", "celsius"}}},
               {"get_time", {{"zone", "CET"}}}},
              {}});
  // With the model's own call id ([CALL_ID], as some v11+ templates write it back).
  const std::string with_id =
      "[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{\"zone\": \"UTC\"}";
  ExpectTurn(Tools(ToolCallFormat::kMistralV11), with_id,
             {"", "", {{"get_time", {{"zone", "UTC"}}}}, {}});
  EXPECT_EQ(Parse(Tools(ToolCallFormat::kMistralV11), {with_id}).ids,
            std::vector<std::string>{"a1B2c3D4e"});
  const Turn fresh = Parse(Tools(ToolCallFormat::kMistralV11),
                           {"[TOOL_CALLS]get_time[ARGS]{\"zone\": \"UTC\"}"});
  ASSERT_EQ(fresh.ids.size(), 1u);
  EXPECT_TRUE(std::regex_match(fresh.ids[0], std::regex("[A-Za-z0-9]{9}"))) << fresh.ids[0];
  for (const std::string output :
       {"[TOOL_CALLS]not a call", "[TOOL_CALLS]get_time[ARGS]oops", "[TOOL_CALLS][ARGS]{}",
        "[TOOL_CALLS]get_time{\"zone\": \"UTC\"}"}) {
    ExpectTurn(Tools(ToolCallFormat::kMistralV11), output, {output, "", {}, {}});
  }
}

TEST(OutputParserTest, PlainJsonFallback) {
  ExpectTurn(Tools(ToolCallFormat::kJson),
             "  [{\"name\": \"a\", \"arguments\": {\"x\": \"}\\\"{\"}}, {\"name\": \"b\", "
             "\"arguments\": \"{\\\"y\\\": 2}\"}]",
             {"", "", {{"a", {{"x", "}\"{"}}}, {"b", {{"y", 2}}}}, {}});
}

TEST(OutputParserTest, AnswersWithoutCallsStayText) {
  ExpectTurn(Tools(ToolCallFormat::kHermes), "The capital of France is Paris.\n",
             {"The capital of France is Paris.\n", "", {}, {}});
  ExpectTurn(Tools(ToolCallFormat::kLlama3Json), "It is {mostly} sunny [today].",
             {"It is {mostly} sunny [today].", "", {}, {}});
  ExpectTurn(Tools(ToolCallFormat::kJson), "{\"answer\": 42}", {"{\"answer\": 42}", "", {}, {}});
  ExpectTurn(Tools(ToolCallFormat::kMistral), "Use [brackets] and <tags>.",
             {"Use [brackets] and <tags>.", "", {}, {}});
}

TEST(OutputParserTest, MalformedCallsStayText) {
  for (const std::string output :
       {"<tool_call>\n{\"name\": get_weather}\n</tool_call>", "<tool_call>\n{\"name\": \"f\"",
        "<tool_call>not json at all", "<tool_call>\n{\"name\": \"f\", \"args\": {}}</tool_call>"}) {
    ExpectTurn(Tools(ToolCallFormat::kHermes), output, {output, "", {}, {}});
  }
  ExpectTurn(Tools(ToolCallFormat::kMistral), "[TOOL_CALLS] oops",
             {"[TOOL_CALLS] oops", "", {}, {}});
}

TEST(OutputParserTest, ParallelOffEndsTheTurnAfterTheFirstCall) {
  OutputParserOptions options = Tools(ToolCallFormat::kHermes);
  options.parallel = false;
  const std::string first =
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}";
  const std::string rest =
      "\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  ExpectTurn(options, first + rest, {"", "", {{"get_time", {{"zone", "CET"}}}}, {}});
  OutputParser parser(options);
  // Up to the arguments' closing brace; then that brace ends them.
  ParsedOutput out = parser.Feed(first.substr(0, first.size() - 2));
  EXPECT_FALSE(parser.turn_over());
  out.Append(parser.Feed("}"));
  EXPECT_TRUE(parser.turn_over());  // the server ends the generation here
  out.Append(parser.Feed("}" + rest + " and some text"));
  out.Append(parser.Finish());
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[1].arguments, "{\"zone\": \"CET\"}");
  // Parallel calls: the turn goes on.
  OutputParser parallel(Tools(ToolCallFormat::kHermes));
  parallel.Feed(first);
  EXPECT_FALSE(parallel.turn_over());
}

TEST(OutputParserTest, ControlTokenMarkersNeverShowInTheContent) {
  // Llama 3.1's built-in tools: <|python_tag|> then Python, which is no JSON call.
  OutputParserOptions llama = Tools(ToolCallFormat::kLlama3Json);
  llama.hidden_markers = {"<|python_tag|>"};
  ExpectTurn(llama, "<|python_tag|>brave_search.call(query=\"weather in Paris\")",
             {"brave_search.call(query=\"weather in Paris\")", "", {}, {}});
  ExpectTurn(llama,
             "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"zone\": \"CET\"}}",
             {"", "", {{"get_time", {{"zone", "CET"}}}}, {}});
  OutputParserOptions mistral = Tools(ToolCallFormat::kMistral);
  mistral.hidden_markers = {"[TOOL_CALLS]"};
  ExpectTurn(mistral, "Sure. [TOOL_CALLS] oops", {"Sure. oops", "", {}, {}});
  ExpectTurn(mistral, "Use [brackets] and [TOOL_C", {"Use [brackets] and [TOOL_C", "", {}, {}});
}

TEST(OutputParserTest, CutCallKeepsWhatStreamed) {
  // max_tokens inside the arguments: the call is out, its arguments unfinished.
  OutputParser parser(Tools(ToolCallFormat::kHermes));
  ParsedOutput out = parser.Feed("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x");
  out.Append(parser.Finish());
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].name, "f");
  EXPECT_EQ(out.tool_calls[1].arguments, "{\"a\": \"x");
  EXPECT_TRUE(parser.called_tools());
}

TEST(OutputParserTest, ReasoningOpenedByThePrompt) {
  // DeepSeek-R1 distills' template ends the prompt with "<think>\n".
  OutputParserOptions options{.tool_calls = std::nullopt, .reasoning = true,
                              .starts_in_reasoning = true, .seed = 0};
  ExpectTurn(options, "Okay, 2 + 2 is 4.\n</think>\n\nThe answer is **4**.",
             {"The answer is **4**.", "Okay, 2 + 2 is 4.\n", {}, {}});
  EXPECT_TRUE(PromptOpensThink("<｜User｜>2+2?<｜Assistant｜><think>\n"));
  EXPECT_FALSE(PromptOpensThink("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(OutputParserTest, ReasoningTagsOnlyAtTheStart) {
  OutputParserOptions options{.tool_calls = std::nullopt, .reasoning = true,
                              .starts_in_reasoning = false, .seed = 0};
  ExpectTurn(options, "No thinking here, just <think> as text.",
             {"No thinking here, just <think> as text.", "", {}, {}});
  // Cut inside the reasoning: all of it is reasoning.
  ExpectTurn(options, "<think>still thinking", {"", "still thinking", {}, {}});
}

// DeepSeek V3.1's calls (its template's markup), and V3/R1's: function<｜tool▁sep｜>NAME, the
// arguments in a ```json fence, a line break between calls. Each parser reads both forms.
const std::string kDeepSeekV31Calls =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": "
    "\"Tokyo\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"zone\": \"JST\"}"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
const std::string kDeepSeekR1Calls =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    "{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
    "get_time\n```json\n{\"zone\": \"JST\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

TEST(OutputParserTest, DeepSeekCallsInBothForms) {
  const std::vector<Call> calls = {{"get_weather", {{"location", "Tokyo"}}},
                                   {"get_time", {{"zone", "JST"}}}};
  for (const ToolCallFormat format : {ToolCallFormat::kDeepSeekV31, ToolCallFormat::kDeepSeekV3}) {
    SCOPED_TRACE(std::string(ToolCallFormatName(format)));
    ExpectTurn(Tools(format), "Let me check." + kDeepSeekV31Calls,
               {"Let me check.", "", calls, {}});
    ExpectTurn(Tools(format), kDeepSeekR1Calls, {"", "", calls, {}});
    // Text after the section is content; a call without its <｜tool▁call▁begin｜> (as
    // llama.cpp's parser takes it), and with spaces around the V3 name.
    ExpectTurn(Tools(format), kDeepSeekV31Calls + "\nDone.", {"Done.", "", calls, {}});
    ExpectTurn(Tools(format),
               "<｜tool▁calls▁begin｜>function<｜tool▁sep｜> get_time \n```\n{\"zone\": \"JST\"}"
               "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               {"", "", {calls[1]}, {}});
    const Turn turn = Parse(Tools(format), {kDeepSeekV31Calls});
    for (const std::string& id : turn.ids) {
      EXPECT_TRUE(std::regex_match(id, std::regex("call_[A-Za-z0-9]{24}"))) << id;
    }
  }
}

TEST(OutputParserTest, DeepSeekR1ThinksThenCalls) {
  // R1's template opens <think> in the prompt; V3.1's thinking mode too.
  OutputParserOptions options = Tools(ToolCallFormat::kDeepSeekV3);
  options.reasoning = true;
  options.starts_in_reasoning = true;
  ExpectTurn(options, "The user wants Tokyo's weather.\n</think>\n\n" + kDeepSeekR1Calls,
             {"", "The user wants Tokyo's weather.\n",
              {{"get_weather", {{"location", "Tokyo"}}}, {"get_time", {{"zone", "JST"}}}},
              {}});
  // V3.1's non-thinking prompt ends with </think>: the output is content from the start.
  options.starts_in_reasoning = false;
  ExpectTurn(options, "Hello!", {"Hello!", "", {}, {}});
}

TEST(OutputParserTest, DeepSeekMalformedCallsStayText) {
  const std::string head = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>";
  for (const ToolCallFormat format : {ToolCallFormat::kDeepSeekV31, ToolCallFormat::kDeepSeekV3}) {
    for (const std::string& output : std::vector<std::string>{
             "<｜tool▁calls▁begin｜>oops", "<｜tool▁calls▁begin｜>", head + "get weather<｜tool▁sep｜>{}",
          head + "f<｜tool▁sep｜>[1]", head + "<｜tool▁sep｜>{}",
          head + "function<｜tool▁sep｜>f\n```python\n{}\n```",
          head + "tool<｜tool▁sep｜>f\n```json\n{}\n```", head + "function<｜tool▁sep｜>f{}",
          head + std::string(600, 'a') + "<｜tool▁sep｜>{}", "a <｜tool▁calls▁end｜> b"}) {
      ExpectTurn(Tools(format), output, {output, "", {}, {}});
    }
  }
  // A call is committed once its head parses: a bad tail after it is content.
  ExpectTurn(Tools(ToolCallFormat::kDeepSeekV31), head + "f<｜tool▁sep｜>{} and more",
             {" and more", "", {{"f", Json::object()}}, {}});
}

// Kimi K2's calls: the model's own functions.NAME:IDX is the call's id.
const std::string kKimiCalls =
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    "<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|><|tool_call_begin|>"
    "functions.get_time:1<|tool_call_argument_begin|>{\"zone\": \"CST\"}<|tool_call_end|>"
    "<|tool_calls_section_end|>";

TEST(OutputParserTest, KimiK2CallsKeepTheirIds) {
  const std::vector<Call> calls = {{"get_weather", {{"city", "Beijing"}}},
                                   {"get_time", {{"zone", "CST"}}}};
  ExpectTurn(Tools(ToolCallFormat::kKimiK2), "I will look." + kKimiCalls,
             {"I will look.", "", calls, {}});
  EXPECT_EQ(Parse(Tools(ToolCallFormat::kKimiK2), {kKimiCalls}).ids,
            (std::vector<std::string>{"functions.get_weather:0", "functions.get_time:1"}));
  // As llama.cpp takes them: a call without the section's marker or its own end marker.
  ExpectTurn(Tools(ToolCallFormat::kKimiK2),
             "<|tool_call_begin|>functions.get_time:3<|tool_call_argument_begin|>{\"zone\": "
             "\"CST\"}",
             {"", "", {calls[1]}, {}});
  // Kimi K2 Thinking: reasoning, then content and calls; or calls opened inside the reasoning,
  // which llama.cpp says the model does.
  OutputParserOptions thinking = Tools(ToolCallFormat::kKimiK2);
  thinking.reasoning = true;
  ExpectTurn(thinking, "<think>The user wants weather.</think>I will look." + kKimiCalls,
             {"I will look.", "The user wants weather.", calls, {}});
  ExpectTurn(thinking, "<think>Call it." + kKimiCalls, {"", "Call it.", calls, {}});
  ExpectTurn(thinking, "<think>No calls, no end", {"", "No calls, no end", {}, {}});
}

TEST(OutputParserTest, KimiK2MalformedCallsStayText) {
  for (const std::string output :
       {"<|tool_calls_section_begin|>oops", "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>functions.:0<|tool_call_argument_begin|>{}",
        "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>nope",
        "<|tool_call_begin|>functions.a:b:0<|tool_call_argument_begin|>{}",
        "<|tool_call_begin|>functions get<|tool_call_argument_begin|>{}",
        "text <|tool_calls_section_end|> text"}) {
    ExpectTurn(Tools(ToolCallFormat::kKimiK2), output, {output, "", {}, {}});
  }
  // Control-token markers never show, even in text that formed no call.
  OutputParserOptions hidden = Tools(ToolCallFormat::kKimiK2);
  for (const std::string_view marker : ToolCallMarkers(ToolCallFormat::kKimiK2)) {
    hidden.hidden_markers.emplace_back(marker);
  }
  ExpectTurn(hidden, "Sure.<|tool_calls_section_begin|> oops", {"Sure. oops", "", {}, {}});
}

// Any bytes, the formats' markup in pieces among them, never crash the parsers, and whatever
// formed no call comes back as it was (but for whitespace before markup).
TEST(OutputParserTest, SectionFormatsSurviveMarkupSoup) {
  const std::vector<std::string> parts = {
      "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
      "<｜tool▁calls▁end｜>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
      "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>", "function",
      "functions.f:0", "f", "\n```json\n", "```", "{", "}", "\"", "\\", " ", "\n", "<｜", "<|",
      "\xff", "x"};
  std::mt19937 random(38);
  for (const ToolCallFormat format :
       {ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31, ToolCallFormat::kKimiK2}) {
    for (int round = 0; round < 300; ++round) {
      std::string output;
      const int count = std::uniform_int_distribution<int>(1, 12)(random);
      for (int i = 0; i < count; ++i) {
        output += parts[std::uniform_int_distribution<size_t>(0, parts.size() - 1)(random)];
      }
      OutputParserOptions options = Tools(format);
      options.reasoning = round % 2 == 1;
      OutputParser parser(options);
      ParsedOutput out;
      for (const char c : output) out.Append(parser.Feed(std::string(1, c)));
      out.Append(parser.Finish());
      // Whitespace around calls belongs to neither; the rest is kept.
      const auto visible = [](std::string text) {
        std::erase_if(text, [](char c) { return c == ' ' || c == '\n'; });
        return text;
      };
      if (out.tool_calls.empty() && !options.reasoning) {
        EXPECT_EQ(visible(out.content), visible(output))
            << ToolCallFormatName(format) << " "
            << Json(output).dump(-1, ' ', false, Json::error_handler_t::replace);
      }
    }
  }
}

// DeepSeek's and Kimi's own templates: the calls they write back into a conversation parse
// into the same calls under the format detected from them, and their generation prompts open
// the reasoning where the model thinks (R1; V3.1 with `thinking`) and not elsewhere.
TEST(OutputParserTest, DeepSeekAndKimiTemplatesRoundTrip) {
  const auto load = [](const std::string& file) {
    StatusOr<ChatTemplate> t = ChatTemplate::FromFile(
        TestDataDir() + "/chat_templates/" + file,
        {.bos_token = "<｜begin▁of▁sentence｜>", .eos_token = "<｜end▁of▁sentence｜>"});
    EXPECT_TRUE(t.ok()) << file << ": " << t.status().ToString();
    return std::move(*t);
  };
  const nlohmann::ordered_json call_messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "Weather in Paris and the time?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "functions.get_weather:0", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "functions.get_time:1", "type": "function",
       "function": {"name": "get_time", "arguments": "{\"zone\": \"CET\"}"}}]},
    {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "21C"}])");
  const std::vector<Call> calls = {{"get_weather", {{"city", "Paris"}}},
                                   {"get_time", {{"zone", "CET"}}}};
  for (const std::string file : {"deepseek_r1_distill.jinja", "deepseek_v31.jinja",
                                 "kimi_k2_thinking.jinja"}) {
    SCOPED_TRACE(file);
    const ChatTemplate t = load(file);
    const ToolCallFormat format = DetectToolCallFormat(t.source());
    const std::vector<std::string_view> markers = ToolCallMarkers(format);
    StatusOr<std::string> rendered =
        t.Render({.messages = call_messages, .add_generation_prompt = false});
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    const size_t begin = rendered->find(markers[0]);  // the section, as the template wrote it
    const size_t end = rendered->find(markers[1], begin);
    ASSERT_NE(end, std::string::npos) << *rendered;
    const std::string section = rendered->substr(begin, end + markers[1].size() - begin);
    ExpectTurn(Tools(format), section, {"", "", calls, {}});
    if (format == ToolCallFormat::kKimiK2) {
      EXPECT_EQ(Parse(Tools(format), {section}).ids,
                (std::vector<std::string>{"functions.get_weather:0", "functions.get_time:1"}));
    }
    EXPECT_TRUE(TemplateHasThinkTags(t.source()));
  }
  const nlohmann::ordered_json question =
      nlohmann::ordered_json::parse(R"([{"role": "user", "content": "2+2?"}])");
  const auto opens_think = [&](const std::string& file, nlohmann::ordered_json variables) {
    StatusOr<std::string> prompt =
        load(file).Render({.messages = question, .extra_variables = std::move(variables)});
    EXPECT_TRUE(prompt.ok()) << prompt.status().ToString();
    return PromptOpensThink(*prompt);
  };
  EXPECT_TRUE(opens_think("deepseek_r1_distill.jinja", nlohmann::ordered_json::object()));
  EXPECT_TRUE(opens_think("deepseek_v31.jinja", {{"thinking", true}}));
  EXPECT_FALSE(opens_think("deepseek_v31.jinja", nlohmann::ordered_json::object()));  // </think>
  EXPECT_FALSE(opens_think("kimi_k2_thinking.jinja", nlohmann::ordered_json::object()));
  EXPECT_FALSE(TemplateHasThinkTags(load("kimi_k2.jinja").source()));
}

TEST(OutputParserTest, FormatsFromTemplates) {
  EXPECT_EQ(DetectToolCallFormat("{{- '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS]' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS]' + name + '[ARGS]' }}"),
            ToolCallFormat::kMistralV11);
  EXPECT_EQ(ToolCallFormatFromName("mistral_v11"), ToolCallFormat::kMistralV11);
  EXPECT_EQ(ToolCallMarkers(ToolCallFormat::kMistralV11),
            (std::vector<std::string_view>{"[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"}));
  EXPECT_EQ(DetectToolCallFormat("<|python_tag|>"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ messages }}"), ToolCallFormat::kJson);
  EXPECT_EQ(ToolCallFormatFromName("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ToolCallFormatFromName("harmony"), ToolCallFormat::kHarmony);
  EXPECT_EQ(ToolCallFormatFromName("channels"), std::nullopt);
  EXPECT_EQ(DetectToolCallFormat("{{- '<|start|>assistant<|channel|>final<|message|>' }}"),
            ToolCallFormat::kHarmony);
  EXPECT_TRUE(TemplateUsesHarmony("<|channel|>analysis<|message|>"));
  EXPECT_FALSE(TemplateUsesHarmony("<think>"));
  // DeepSeek's and Kimi's templates (tests/data/chat_templates, as llama.cpp vendors them).
  const auto detected = [](const std::string& file) {
    std::ifstream in(TestDataDir() + "/chat_templates/" + file);
    EXPECT_TRUE(in.good()) << file;
    return DetectToolCallFormat(std::string(std::istreambuf_iterator<char>(in), {}));
  };
  EXPECT_EQ(detected("deepseek_r1_distill.jinja"), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(detected("deepseek_v31.jinja"), ToolCallFormat::kDeepSeekV31);
  EXPECT_EQ(detected("kimi_k2.jinja"), ToolCallFormat::kKimiK2);  // only its tool_declare turn
  EXPECT_EQ(detected("kimi_k2_thinking.jinja"), ToolCallFormat::kKimiK2);
  EXPECT_EQ(detected("qwen2.5.jinja"), ToolCallFormat::kHermes);
  for (const ToolCallFormat format :
       {ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31, ToolCallFormat::kKimiK2}) {
    EXPECT_EQ(ToolCallFormatFromName(ToolCallFormatName(format)), format);
  }
  EXPECT_EQ(ToolCallFormatName(ToolCallFormat::kDeepSeekV3), "deepseek_v3");
  EXPECT_EQ(ToolCallFormatName(ToolCallFormat::kKimiK2), "kimi_k2");
  EXPECT_EQ(ToolCallMarkers(ToolCallFormat::kKimiK2),
            (std::vector<std::string_view>{"<|tool_calls_section_begin|>",
                                           "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                                           "<|tool_call_end|>", "<|tool_call_argument_begin|>"}));
  EXPECT_EQ(ToolCallMarkers(ToolCallFormat::kDeepSeekV31).size(), 5u);
  EXPECT_TRUE(ToolCallOpeners(ToolCallFormat::kHermes).empty());
}

// gpt-oss: the harmony parser with tools offered (or not) and its reasoning.
OutputParserOptions Harmony(bool tools) {
  return {.tool_calls = tools ? std::optional(ToolCallFormat::kHarmony) : std::nullopt,
          .reasoning = true, .starts_in_reasoning = false, .harmony = true, .seed = 7};
}

TEST(OutputParserTest, HarmonyAnalysisThenFinal) {
  // OpenAI's harmony guide's answer, with and without the <|end|> our tokenizer drops (a
  // control token) and with the <|return|> that stops generation.
  const Turn want{"2 + 2 = 4.", "User asks a simple math question. Answer: 4.", {}, {}};
  for (const std::string end : {"<|end|>", ""}) {
    ExpectTurn(Harmony(false),
               "<|channel|>analysis<|message|>User asks a simple math question. Answer: 4." +
                   end + "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
               want);
  }
  // Cut by max_tokens inside the answer: what streamed is the answer.
  ExpectTurn(Harmony(true), "<|channel|>final<|message|>2 + 2", {"2 + 2", "", {}, {}});
}

TEST(OutputParserTest, HarmonyToolCall) {
  // The guide's function call: the recipient after the channel, <|constrain|>json.
  const std::string reasoning = "User asks weather in SF. Use get_current_weather.";
  ExpectTurn(Harmony(true),
             "<|channel|>analysis<|message|>" + reasoning +
                 "<|end|><|start|>assistant<|channel|>commentary to=functions.get_current_weather "
                 "<|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>",
             {"", reasoning, {{"get_current_weather", {{"location", "San Francisco"}}}}, {}});
  // The recipient in the role part, a plain content type, two calls, a preamble before them.
  ExpectTurn(Harmony(true),
             "<|channel|>commentary<|message|>Checking both.<|end|>"
             "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>"
             "{\"q\": \"a\"}<|call|><|start|>assistant<|channel|>commentary to=functions.lookup"
             "<|message|>{\"q\": \"b\"}<|call|>",
             {"Checking both.", "", {{"lookup", {{"q", "a"}}}, {"lookup", {{"q", "b"}}}}, {}});
  OutputParserOptions single = Harmony(true);
  single.parallel = false;
  ExpectTurn(single,
             "<|channel|>commentary to=functions.f<|message|>{}<|call|>"
             "<|channel|>commentary to=functions.g<|message|>{\"x\": 1}<|call|>",
             {"", "", {{"f", Json::object()}}, {}});
}

TEST(OutputParserTest, HarmonyMalformedStaysText) {
  for (const std::string output :
       {"Plain text without any header.", "<|channel|>shouting<|message|>hi<|return|>",
        "<|start|>user<|channel|>final<|message|>not ours", "<|channel|>final<|end|>oops",
        "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}<|call|>"}) {
    ExpectTurn(Harmony(true), output, {output, "", {}, {}});
  }
  // A call where no tools were offered stays text too.
  const std::string call = "<|channel|>commentary to=functions.f<|message|>{}<|call|>";
  ExpectTurn(Harmony(false), call, {call, "", {}, {}});
  // After a good message, a bad header turns the rest to text.
  ExpectTurn(Harmony(true),
             "<|channel|>analysis<|message|>Hmm.<|start|>assistant<|channel|>?<|message|>x",
             {"<|start|>assistant<|channel|>?<|message|>x", "Hmm.", {}, {}});
}

}  // namespace
}  // namespace tokenmill
