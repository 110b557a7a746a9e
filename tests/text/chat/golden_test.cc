// Our rendering against Python jinja2's, byte for byte: the goldens come from
// tests/reference/make_chat_golden.py (Hugging Face's chat environment), never from us.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "text/chat/chat_template.h"
#include "text/jinja/template.h"

namespace tokenmill {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

const std::string kDataDir = std::string(TOKENMILL_TEST_DATA_DIR) + "/chat_templates/";

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << "missing " << path;
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

Json ReadJson(const std::string& path) { return Json::parse(ReadFile(path)); }

// A golden case's request: its conversation from conversations.json, the template's extra
// variables, then the conversation's (which win, as in the script).
ChatRequest RequestOf(const Json& golden, const Json& c) {
  static const Json conversations = ReadJson(kDataDir + "conversations.json");
  const Json& conversation = conversations.at(c["conversation"].get<std::string>());
  ChatRequest request;
  request.messages = conversation["messages"];
  request.tools = conversation["tools"];
  request.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  request.extra_variables = golden["extra_variables"];
  request.extra_variables.update(conversation["extra_variables"]);
  return request;
}

std::string CaseName(const Json& c) {
  return c["conversation"].get<std::string>() +
         (c["add_generation_prompt"].get<bool>() ? "/prompt" : "/no_prompt");
}

// A dated golden's output (one whose template writes strftime_now's date): today's date, as
// the script replaced it, by the golden's mark.
std::string MarkToday(std::string text, const std::string& mark) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char today[16];
  const size_t n = std::strftime(today, sizeof(today), "%Y-%m-%d", &local);
  for (size_t at = text.find(today, 0, n); at != std::string::npos; at = text.find(today, at, n)) {
    text.replace(at, n, mark);
  }
  return text;
}

// Checks one golden case: the same output, or a failure where jinja2 failed (with the
// template's own message where it called raise_exception).
void ExpectMatches(const StatusOr<std::string>& rendered, const Json& c,
                   const std::string& today_mark = "") {
  if (c.contains("output")) {
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    EXPECT_EQ(today_mark.empty() ? *rendered : MarkToday(*rendered, today_mark),
              c["output"].get<std::string>());
    return;
  }
  ASSERT_FALSE(rendered.ok()) << "jinja2 failed with: " << c["message"]
                              << "\nwe rendered: " << *rendered;
  EXPECT_EQ(rendered.status().code(), StatusCode::kInvalidArgument);
  if (c["error"] == "raised") {
    EXPECT_THAT(rendered.status().message(), HasSubstr("template raised an error"));
    EXPECT_THAT(rendered.status().message(), HasSubstr(c["message"].get<std::string>()));
  }
}

class TemplateGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TemplateGoldenTest, MatchesJinja2) {
  const Json golden = ReadJson(kDataDir + GetParam() + ".golden.json");
  const std::string source = ReadFile(kDataDir + golden["template"].get<std::string>());
  ChatSpecialTokens tokens{golden["bos_token"], golden["eos_token"]};
  const StatusOr<ChatTemplate> chat_template = ChatTemplate::FromSource(source, tokens);
  ASSERT_TRUE(chat_template.ok()) << chat_template.status().ToString();
  ASSERT_FALSE(golden["cases"].empty());
  for (const Json& c : golden["cases"]) {
    SCOPED_TRACE(CaseName(c));
    ExpectMatches(chat_template->Render(RequestOf(golden, c)), c, golden.value("dated", ""));
  }
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, TemplateGoldenTest,
                         ::testing::Values("smollm2", "chatml", "llama2", "llama3",
                                           "llama3.1_tools", "mistral_instruct", "mistral_tools",
                                           "qwen2.5", "hermes_tools", "gemma", "phi3",
                                           "deepseek_r1_distill", "deepseek_v31", "phi4_mini",
                                           "kimi_k2", "kimi_k2_thinking", "glm46",
                                           "nemotron_nano_v2", "gpt_oss"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& ch : name) {
                             if (ch == '.') ch = '_';
                           }
                           return name;
                         });

// One Jinja feature per snippet, including the errors jinja2 reports.
TEST(FeatureGoldenTest, MatchesJinja2) {
  const Json cases = ReadJson(kDataDir + "features.golden.json");
  ASSERT_FALSE(cases.empty());
  for (const Json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const StatusOr<jinja::Template> compiled =
        jinja::Template::Parse(c["template"].get<std::string>());
    if (c.value("error", "") == "syntax") {
      ASSERT_FALSE(compiled.ok()) << "jinja2: " << c["message"];
      // jinja2 says "line N: ..."; we say "at line N, column C".
      const std::string line =
          c["message"].get<std::string>().substr(0, c["message"].get<std::string>().find(':'));
      EXPECT_THAT(compiled.status().message(), HasSubstr("syntax error at " + line + ","));
      continue;
    }
    if (!compiled.ok()) {
      // jinja2 rejects unknown tests only when rendering; we do it when parsing.
      EXPECT_EQ(c.value("error", ""), "failed") << compiled.status().ToString();
      continue;
    }
    ExpectMatches(compiled->Render(c["variables"]), c);
  }
}

// The default model's template comes out of its GGUF, with its special tokens, and renders as
// jinja2 rendered the same text.
TEST(DefaultModelTemplateTest, GgufTemplateMatchesGolden) {
  const std::string model = std::string(TOKENMILL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::ifstream(model).good()) GTEST_SKIP() << "no " << model << " (run scripts/setup)";
  const StatusOr<GgufFile> gguf = GgufFile::Open(model);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  const StatusOr<ChatTemplate> chat_template = ChatTemplate::FromGguf(*gguf);
  ASSERT_TRUE(chat_template.ok()) << chat_template.status().ToString();
  EXPECT_EQ(chat_template->source(), ReadFile(kDataDir + "smollm2.jinja"));
  const Json golden = ReadJson(kDataDir + "smollm2.golden.json");
  EXPECT_EQ(chat_template->special_tokens().bos_token, golden["bos_token"]);
  EXPECT_EQ(chat_template->special_tokens().eos_token, golden["eos_token"]);
  for (const Json& c : golden["cases"]) {
    SCOPED_TRACE(CaseName(c));
    ExpectMatches(chat_template->Render(RequestOf(golden, c)), c);
  }
}

}  // namespace
}  // namespace tokenmill
