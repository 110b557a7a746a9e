// Our rendering against Python jinja2's, byte for byte: the goldens come from
// tests/reference/make_chat_golden.py (Hugging Face's chat environment), never from us.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>

#include "gguf/gguf.h"
#include "tests/test_paths.h"
#include "text/chat/chat_template.h"
#include "text/jinja/template.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

const std::string kDataDir = TestDataDir() + "/chat_templates/";

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

// Whether bytes [begin, end) of a rendered chat lie inside one span the template wrote.
bool InsideMarkup(const jinja::MarkedText& rendered, size_t begin, size_t end) {
  for (const jinja::ByteSpan& span : rendered.template_spans) {
    if (span.begin <= begin && end <= span.end) return true;
  }
  return false;
}

// What templates write as control tokens (ChatML, Llama 3, Gemma, [INST], DeepSeek's
// full-width bars, <s>); no golden conversation holds one in its text.
const std::regex kMarker(
    R"(<\|[^|<>\s]{1,40}\|>|<\xEF\xBD\x9C[^<>]{1,60}?\xEF\xBD\x9C>|\[/?[A-Z_]{3,30}\]|</?s>|)"
    R"(<(start|end)_of_turn>|<SPECIAL_[0-9]+>)");

// Every marker in every golden output is the template's markup (text/jinja/marks.h): the
// marks follow each template's string operations, so tokenizing with them parses the
// markup as before and only what the client wrote stays text.
TEST_P(TemplateGoldenTest, EveryMarkerIsTheTemplatesMarkup) {
  const Json golden = ReadJson(kDataDir + GetParam() + ".golden.json");
  const std::string source = ReadFile(kDataDir + golden["template"].get<std::string>());
  ChatSpecialTokens tokens{golden["bos_token"], golden["eos_token"]};
  const StatusOr<ChatTemplate> chat_template = ChatTemplate::FromSource(source, tokens);
  ASSERT_TRUE(chat_template.ok()) << chat_template.status().ToString();
  int markers = 0;
  for (const Json& c : golden["cases"]) {
    if (!c.contains("output")) continue;
    SCOPED_TRACE(CaseName(c));
    const StatusOr<jinja::MarkedText> rendered = chat_template->RenderMarked(RequestOf(golden, c));
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    const std::string& text = rendered->text;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kMarker);
         it != std::sregex_iterator(); ++it) {
      const size_t at = static_cast<size_t>(it->position());
      ++markers;
      EXPECT_TRUE(InsideMarkup(*rendered, at, at + static_cast<size_t>(it->length())))
          << it->str() << " at byte " << at << " of:\n" << text;
    }
  }
  EXPECT_GT(markers, 0) << "no marker of " << GetParam() << " matched: extend kMarker";
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
  const std::string model = TestModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
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

// The marks change no ids of a conversation without special-token text: each golden case
// tokenized with special tokens parsed only in the markup, and everywhere as before, on the
// vocabulary of the template's model family.
TEST(MarkedTokenizationTest, IdsOfOrdinaryConversationsAreUnchanged) {
  const std::pair<std::string, std::string> kTemplateVocab[] = {
      {"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"}, {"chatml", "ggml-vocab-qwen2.gguf"},
      {"qwen2.5", "ggml-vocab-qwen2.gguf"},           {"hermes_tools", "ggml-vocab-qwen2.gguf"},
      {"llama3", "llama31-vocab.gguf"},               {"llama3.1_tools", "llama31-vocab.gguf"},
      {"gemma", "gemma-3-270m-q4_k_m.gguf"},          {"phi3", "ggml-vocab-phi-3.gguf"},
      {"mistral_instruct", "mistral-v3-vocab.gguf"},  {"mistral_tools", "mistral-v3-vocab.gguf"},
      {"llama2", "ggml-vocab-llama-spm.gguf"},        {"llama2", "stories260K.gguf"}};
  for (const auto& [name, vocab] : kTemplateVocab) {
    SCOPED_TRACE(name + " on " + vocab);
    const std::string path = TestModelsDir() + "/" + vocab;
    if (!std::ifstream(path).good()) GTEST_SKIP() << "no " << path << " (run scripts/setup)";
    const StatusOr<GgufFile> gguf = GgufFile::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    const StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf(*gguf);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    const Json golden = ReadJson(kDataDir + name + ".golden.json");
    const StatusOr<ChatTemplate> chat_template = ChatTemplate::FromSource(
        ReadFile(kDataDir + golden["template"].get<std::string>()),
        {golden["bos_token"], golden["eos_token"]});
    ASSERT_TRUE(chat_template.ok()) << chat_template.status().ToString();
    for (const Json& c : golden["cases"]) {
      if (!c.contains("output")) continue;
      SCOPED_TRACE(CaseName(c));
      const StatusOr<jinja::MarkedText> rendered =
          chat_template->RenderMarked(RequestOf(golden, c));
      ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
      const std::vector<TextRange> markup = PromptMarkup(*rendered);
      const StatusOr<std::vector<TokenId>> marked = tokenizer->Encode(
          rendered->text,
          {.add_special = true, .parse_special = true, .special_token_ranges = &markup});
      const StatusOr<std::vector<TokenId>> everywhere =
          tokenizer->Encode(rendered->text, {.add_special = true, .parse_special = true});
      ASSERT_TRUE(marked.ok() && everywhere.ok());
      EXPECT_EQ(*marked, *everywhere);
    }
  }
}

}  // namespace
}  // namespace tokenmill
