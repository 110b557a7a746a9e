// Tool conversations through the wire (v1::Chat, arguments as JSON text) and RenderChat into
// the real templates of tests/data/chat_templates, against Python jinja2's rendering of the
// same conversation with Hugging Face's message shapes (the goldens of
// tests/reference/make_chat_golden.py): what the model sees is what its template expects.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/grpc/request_builder.h"
#include "tests/test_paths.h"

namespace tokenmill::server {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDataDir = TestDataDir() + "/chat_templates/";

Json ReadJson(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << "missing " << path;
  std::ostringstream text;
  text << file.rdbuf();
  return Json::parse(text.str());
}

// The conversation as a client sends it on the wire.
v1::Chat WireChat(const Json& conversation, const Json& extra, bool add_generation_prompt) {
  v1::Chat chat;
  for (const Json& m : conversation["messages"]) {
    v1::ChatMessage& out = *chat.add_messages();
    out.set_role(m["role"].get<std::string>());
    if (m.contains("content") && !m["content"].is_null()) {
      out.set_content(m["content"].get<std::string>());
    }
    if (m.contains("tool_call_id")) out.set_tool_call_id(m["tool_call_id"].get<std::string>());
    if (m.contains("name")) out.set_name(m["name"].get<std::string>());
    if (!m.contains("tool_calls")) continue;
    for (const Json& call : m["tool_calls"]) {
      v1::ToolCall& wire = *out.add_tool_calls();
      wire.set_id(call["id"].get<std::string>());
      wire.set_name(call["function"]["name"].get<std::string>());
      wire.set_arguments(call["function"]["arguments"].dump());
    }
  }
  if (!conversation["tools"].is_null()) chat.set_tools_json(conversation["tools"].dump());
  if (!extra.empty()) chat.set_template_kwargs_json(extra.dump());
  chat.set_add_generation_prompt(add_generation_prompt);
  return chat;
}

// Conversations whose messages are all in the wire's shape (string contents, arguments as
// objects: a client's arguments string is an object by the time the template sees it).
bool WireShaped(const Json& conversation) {
  for (const Json& m : conversation["messages"]) {
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string()) {
      return false;
    }
    if (!m.contains("tool_calls")) continue;
    for (const Json& call : m["tool_calls"]) {
      if (!call["function"]["arguments"].is_object()) return false;
    }
  }
  return true;
}

class ChatToolsRenderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatToolsRenderTest, MatchesJinja2) {
  const Json conversations = ReadJson(kDataDir + "conversations.json");
  const Json golden = ReadJson(kDataDir + GetParam() + ".golden.json");
  std::ifstream file(kDataDir + golden["template"].get<std::string>(), std::ios::binary);
  std::ostringstream source;
  source << file.rdbuf();
  StatusOr<ChatTemplate> chat_template = ChatTemplate::FromSource(
      source.str(),
      {golden["bos_token"].get<std::string>(), golden["eos_token"].get<std::string>()});
  ASSERT_TRUE(chat_template.ok()) << chat_template.status().ToString();
  int checked = 0;
  for (const Json& c : golden["cases"]) {
    const std::string name = c["conversation"].get<std::string>();
    const Json& conversation = conversations[name];
    // A tool result without a name gets its call's name here (Hermes' template refuses it
    // without): ToolResultGetsItsCallsName checks that one.
    if (!WireShaped(conversation) || conversation["tools"].is_null() ||
        name == "tool_result_without_name") {
      continue;
    }
    SCOPED_TRACE(name);
    Json extra = golden["extra_variables"];
    extra.update(conversation["extra_variables"]);
    const StatusOr<std::string> rendered = RenderChat(
        WireChat(conversation, extra, c["add_generation_prompt"].get<bool>()), &*chat_template);
    if (c.contains("output")) {
      ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
      EXPECT_EQ(*rendered, c["output"].get<std::string>());
    } else {
      EXPECT_FALSE(rendered.ok()) << "jinja2 failed with " << c["message"];
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);  // the tool conversations, with and without the prompt
}

TEST(ChatToolsRender, ToolResultGetsItsCallsNameAndPlainTemplatesSeeTheCalls) {
  const Json conversations = ReadJson(kDataDir + "conversations.json");
  const Json& conversation = conversations["tool_result_without_name"];
  ASSERT_FALSE(conversation["messages"].back().contains("name"));
  const v1::Chat chat = WireChat(conversation, Json::object(), true);
  StatusOr<ChatTemplate> hermes = ChatTemplate::FromFile(kDataDir + "hermes_tools.jinja", {});
  ASSERT_TRUE(hermes.ok());
  const StatusOr<std::string> rendered = RenderChat(chat, &*hermes);
  ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
  EXPECT_NE(rendered->find("{\"name\": \"get_weather\", \"content\": \"sunny\"}"),
            std::string::npos)
      << *rendered;
  // ChatML knows no tools: the call shows in the assistant's content.
  StatusOr<ChatTemplate> chatml = ChatTemplate::FromFile(kDataDir + "chatml.jinja", {});
  ASSERT_TRUE(chatml.ok());
  const StatusOr<std::string> plain = RenderChat(chat, &*chatml);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_NE(plain->find("assistant\n{\"name\":\"get_weather\",\"arguments\":{"),
            std::string::npos)
      << *plain;
}

// gpt-oss's template reads an assistant's reasoning as `thinking` and fails on a null
// content (`"..." in message.content`): a turn of calls alone, as clients send it, renders
// with its reasoning as the analysis message before the call.
TEST(ChatToolsRender, HarmonyTemplateGetsThinkingAndNoNullContent) {
  v1::Chat chat;
  v1::ChatMessage& user = *chat.add_messages();
  user.set_role("user");
  user.set_content("Weather in Paris?");
  v1::ChatMessage& assistant = *chat.add_messages();
  assistant.set_role("assistant");
  assistant.set_reasoning("The user wants the weather.");
  v1::ToolCall& call = *assistant.add_tool_calls();
  call.set_id("call_1");
  call.set_name("get_weather");
  call.set_arguments(R"({"city": "Paris"})");
  v1::ChatMessage& result = *chat.add_messages();
  result.set_role("tool");
  result.set_tool_call_id("call_1");
  result.set_content("sunny");
  chat.set_tools_json(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "The weather now.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  StatusOr<ChatTemplate> gpt_oss = ChatTemplate::FromFile(kDataDir + "gpt_oss.jinja", {});
  ASSERT_TRUE(gpt_oss.ok());
  const StatusOr<std::string> rendered = RenderChat(chat, &*gpt_oss);
  ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
  EXPECT_NE(rendered->find("<|start|>assistant<|channel|>analysis<|message|>The user wants the "
                           "weather.<|end|><|start|>assistant to=functions.get_weather"
                           "<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"),
            std::string::npos)
      << *rendered;
  EXPECT_NE(rendered->find("<|start|>functions.get_weather to=assistant<|channel|>commentary"
                           "<|message|>\"sunny\"<|end|>"),
            std::string::npos)
      << *rendered;
}

INSTANTIATE_TEST_SUITE_P(ToolTemplates, ChatToolsRenderTest,
                         ::testing::Values("hermes_tools", "qwen2.5", "llama3.1_tools",
                                           "mistral_tools", "phi4_mini", "glm46", "kimi_k2",
                                           "deepseek_v31"));

}  // namespace
}  // namespace tokenmill::server
