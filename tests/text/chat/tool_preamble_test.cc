// The generic tool-use preamble: which templates need it, what it says, where it goes, and
// that the plain-JSON parser reads the call it asks for.
#include "text/chat/tool_preamble.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "text/chat/tool_call_parser.h"

namespace tokenmill {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

const Json kTools = Json::parse(R"([{"type": "function", "function": {
  "name": "get_weather", "description": "The weather in a city.",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]}}}])");

TEST(TemplateRendersToolsTest, SeesTheVariableNotLongerNames) {
  EXPECT_TRUE(TemplateRendersTools("{% if tools %}{{ tools | tojson }}{% endif %}"));
  EXPECT_TRUE(TemplateRendersTools("{%- if tools is not none -%}"));
  EXPECT_FALSE(TemplateRendersTools("{% for m in messages %}{{ m.content }}{% endfor %}"));
  EXPECT_FALSE(TemplateRendersTools("{{ has_tools_x }}{{ mytools }}"));
}

TEST(GenericToolPreambleTest, ListsEachToolAndTheCallShape) {
  const std::string preamble = GenericToolPreamble(kTools);
  EXPECT_THAT(preamble, HasSubstr(R"({"name":"get_weather","description":"The weather in a city.",)"
                                  R"("parameters":{"type":"object")"));
  EXPECT_THAT(preamble, HasSubstr(R"({"name": "<the tool's name>", "arguments": {)"));
  EXPECT_THAT(preamble, HasSubstr("Otherwise answer in plain text."));
}

TEST(GenericToolPreambleTest, SkipsToolsWithoutAFunction) {
  const std::string preamble = GenericToolPreamble(Json::parse(R"([{"type": "web_search"}, 3])"));
  EXPECT_THAT(preamble, ::testing::Not(HasSubstr("web_search")));
}

TEST(WithGenericToolPreambleTest, GoesBeforeTheSystemText) {
  const Json messages = Json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  const Json out = WithGenericToolPreamble(messages, kTools);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["content"], GenericToolPreamble(kTools) + "\n\nBe brief.");
  EXPECT_EQ(out[1], messages[1]);
}

TEST(WithGenericToolPreambleTest, IsANewSystemMessageWhenNoneLeads) {
  const Json messages = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  const Json out = WithGenericToolPreamble(messages, kTools);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], (Json{{"role", "system"}, {"content", GenericToolPreamble(kTools)}}));
  EXPECT_EQ(out[1], messages[0]);
}

TEST(WithGenericToolPreambleTest, TheCallItAsksForParsesAsATool) {
  ToolCallParser parser(ToolCallFormat::kJson, 1);
  ParsedOutput out;
  parser.Feed(R"({"name": "get_weather", "arguments": {"city": "Paris"}})", out);
  parser.Finish(out);
  ASSERT_FALSE(out.tool_calls.empty());
  std::string arguments;
  for (const ToolCallDelta& delta : out.tool_calls) {
    EXPECT_EQ(delta.index, 0);
    arguments += delta.arguments;
  }
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(out.content, "");
}

}  // namespace
}  // namespace tokenmill
