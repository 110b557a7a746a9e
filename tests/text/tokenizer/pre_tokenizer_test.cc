// Pre-tokenizer splits of the vocabularies the two test models do not cover (Llama 3, Qwen2,
// GPT-2) against the `regex` module running the expressions of their original tokenizer.json
// (tests/data/tokenizer/pre_tokenizer_splits.json, from make_tokenizer_golden.py).
#include "text/tokenizer/pre_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace tokenmill::tokenizer {
namespace {

using ::testing::HasSubstr;

TEST(PreTokenizerTest, SplitsLikeTheOriginalRegexes) {
  std::ifstream in(TestDataDir() + "/tokenizer/pre_tokenizer_splits.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden.size(), 3u);
  for (const auto& [name, cases] : golden.items()) {
    StatusOr<PreTokenizer> pre = PreTokenizer::ForName(name);
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    ASSERT_GE(cases.size(), 500u);
    int mismatches = 0;
    std::vector<std::string_view> pieces;
    for (const nlohmann::json& c : cases) {
      const std::string text = c.at("text").get<std::string>();
      ASSERT_TRUE(pre->Split(text, pieces).ok());
      const std::vector<std::string> ours(pieces.begin(), pieces.end());
      const auto expected = c.at("pieces").get<std::vector<std::string>>();
      if (ours != expected && ++mismatches <= 5) {
        ADD_FAILURE() << name << " " << nlohmann::json(text).dump() << "\n  ours:     "
                      << nlohmann::json(ours).dump() << "\n  expected: "
                      << nlohmann::json(expected).dump();
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

TEST(PreTokenizerTest, UnknownNameIsRefusedWithTheKnownOnes) {
  const StatusOr<PreTokenizer> pre = PreTokenizer::ForName("no-such-pre-tokenizer");
  ASSERT_FALSE(pre.ok());
  EXPECT_THAT(pre.status().message(), HasSubstr("tokenizer.ggml.pre 'no-such-pre-tokenizer'"));
  EXPECT_THAT(pre.status().message(), HasSubstr("smollm"));
  EXPECT_THAT(pre.status().message(), HasSubstr("llama-bpe"));
  EXPECT_THAT(pre.status().message(), HasSubstr("qwen2"));
}

TEST(PreTokenizerTest, MissingNameMeansLlamaCppDefault) {
  StatusOr<PreTokenizer> pre = PreTokenizer::ForName("");
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(pre->name(), "default");
  std::vector<std::string_view> pieces;
  // Punctuation runs first, then GPT-2's split, then digit runs cut into ASCII triples.
  ASSERT_TRUE(pre->Split("hi, 東京 12345~~  ", pieces).ok());
  EXPECT_THAT(pieces, ::testing::ElementsAre("hi", ",", " 東京", " ", "123", "45", "~~", "  "));
}

// DeepSeek-V3's three splits in turn and Kimi K2's hand-written one, traced through llama.cpp's
// code (llama-vocab.cpp, unicode.cpp); pre_variants_test holds the ids to llama.cpp itself.
TEST(PreTokenizerTest, DeepSeekV3AndKimiK2SplitAsLlamaCpp) {
  std::vector<std::string_view> pieces;
  StatusOr<PreTokenizer> deepseek = PreTokenizer::ForName("deepseek-v3");
  ASSERT_TRUE(deepseek.ok()) << deepseek.status().ToString();
  // Digits by threes, then ideograph and kana runs, then words: an ASCII punctuation
  // character takes the ASCII letters after it, a mark stays with its letter.
  ASSERT_TRUE(deepseek->Split("中文abc 12345 日本語カタカナ a.NET e\u0301!", pieces).ok());
  EXPECT_THAT(pieces, ::testing::ElementsAre("中文", "abc", " ", "123", "45", " ", "日本語カタカナ",
                                             " a", ".NET", " e\u0301", "!"));
  StatusOr<PreTokenizer> kimi = PreTokenizer::ForName("kimi-k2");
  ASSERT_TRUE(kimi.ok()) << kimi.status().ToString();
  // Han runs (U+3005 is no Han to llama.cpp, an extension-B ideograph is) apart from other
  // letters, one letter run whatever its case, a mark apart, contractions kept.
  ASSERT_TRUE(kimi->Split("你好world 12345 it's HelloWorld\n\n𠀀々abc e\u0301", pieces).ok());
  EXPECT_THAT(pieces, ::testing::ElementsAre("你好", "world", " ", "123", "45", " it's",
                                             " HelloWorld", "\n\n", "𠀀", "々abc", " e", "\u0301"));
}

// Long runs must not make the split quadratic; this only checks the pieces (speed is measured
// outside the tests).
TEST(PreTokenizerTest, LongRunsSplitIntoFewPieces) {
  StatusOr<PreTokenizer> pre = PreTokenizer::ForName("llama-bpe");
  ASSERT_TRUE(pre.ok());
  const std::string text = std::string(100000, ' ') + "x" + std::string(100000, 'a');
  std::vector<std::string_view> pieces;
  ASSERT_TRUE(pre->Split(text, pieces).ok());
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), 99999u);
  EXPECT_EQ(pieces[1].size(), 100002u);
}

// Any text must split, however long its runs: tekken's repeated letter groups once ran out of
// PCRE2's JIT stack at about 1000 letters. Single-class runs are one piece under every split.
TEST(PreTokenizerTest, HundredThousandCharacterRunsSplitUnderEveryPreTokenizer) {
  const std::vector<std::string> names = {"default",   "gpt-2",  "smollm",   "starcoder",
                                          "llama-bpe", "llama3", "llama-v3", "qwen2",
                                          "tekken",    "gpt-4o", "deepseek-r1-qwen",
                                          "deepseek-v3", "kimi-k2"};
  auto repeat = [](std::string_view unit, size_t chars) {
    std::string s;
    for (size_t i = 0; i < chars; ++i) s += unit;
    return s;
  };
  constexpr size_t kChars = 100000;
  struct Run {
    std::string text;
    bool one_piece;
  };
  const std::vector<Run> runs = {
      {repeat("a", kChars), true},      {repeat("A", kChars), true},
      {repeat("東", kChars), true},     {repeat(" ", kChars), true},
      {repeat("!", kChars), true},      {repeat("7", kChars), false},
      {repeat("aB", kChars / 2), false}, {repeat("é", kChars), true},
  };
  std::vector<std::string_view> pieces;
  for (const std::string& name : names) {
    StatusOr<PreTokenizer> pre = PreTokenizer::ForName(name);
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    for (const Run& run : runs) {
      const std::string what = name + " on 100000 x '" + run.text.substr(0, 2) + "'";
      const Status status = pre->Split(run.text, pieces);
      ASSERT_TRUE(status.ok()) << what << ": " << status.ToString();
      std::string joined;
      for (const std::string_view p : pieces) joined += p;
      EXPECT_EQ(joined, run.text) << what;
      if (run.one_piece) {
        EXPECT_EQ(pieces.size(), 1u) << what;
      }
    }
  }
}

// Tekken's letter groups past 100k: a million letters fit the JIT's 64 MiB stack; two million
// spill into the interpreter, whose heap is capped, and are refused by size rather than
// costing gigabytes.
TEST(PreTokenizerTest, TekkenMillionLetterRunSplitsAndTwoMillionAreRefusedBySize) {
  StatusOr<PreTokenizer> pre = PreTokenizer::ForName("tekken");
  ASSERT_TRUE(pre.ok());
  std::vector<std::string_view> pieces;
  ASSERT_TRUE(pre->Split(std::string(1000000, 'a'), pieces).ok());
  EXPECT_EQ(pieces.size(), 1u);
  const Status status = pre->Split(std::string(2000000, 'a'), pieces);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("in a piece of 2000000 bytes"));
}

}  // namespace
}  // namespace tokenmill::tokenizer
