#include "grammar/regex.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "tests/grammar/test_vocab.h"

namespace tokenmill::grammar {
namespace {

using ::testing::HasSubstr;

bool FullMatch(const std::string& regex, const std::string& text) {
  static const auto vocab = testing::SmallVocabulary();
  GrammarMatcher matcher(testing::MustCompile(GrammarSpec::Kind::kRegex, regex, vocab));
  return matcher.AcceptBytes(text) && matcher.CanTerminate();
}

TEST(RegexTest, MatchesLikePythonFullmatch) {
  EXPECT_TRUE(FullMatch(R"(\d{3}-\d{2,})", "123-45"));
  EXPECT_TRUE(FullMatch(R"(\d{3}-\d{2,})", "123-456789"));
  EXPECT_FALSE(FullMatch(R"(\d{3}-\d{2,})", "12-45"));
  EXPECT_TRUE(FullMatch(R"(^(?:ab|c)+?x*$)", "abcab"));
  EXPECT_TRUE(FullMatch(R"((?P<word>[A-Za-z_]\w*)\s?=\s?.+)", "x_1 = anything €"));
  EXPECT_FALSE(FullMatch(R"([^a-c]+)", "xbz"));
  EXPECT_TRUE(FullMatch(R"([^a-c]+)", "xyz€"));
  EXPECT_TRUE(FullMatch(R"(a.c)", "a€c"));
  EXPECT_FALSE(FullMatch(R"(a.c)", "a\nc"));
  EXPECT_TRUE(FullMatch(R"(\(\)\[\]\.\*\\)", "()[].*\\"));
  EXPECT_TRUE(FullMatch(R"(x|)", ""));
  EXPECT_TRUE(FullMatch(R"([-a]\u00e9)", "-é"));
}

TEST(RegexTest, RefusesWhatItCannotMatchWithTheOffset) {
  struct Case {
    const char* regex;
    const char* message;
  };
  for (const Case& c : {
           Case{R"((a)\1)", "offset 3: backreferences are not supported"},
           Case{R"(a(?=b))", "offset 3: lookahead, flags and other (?...) groups"},
           Case{R"(\bword)", "offset 0: the assertion \\b is not supported"},
           Case{R"(a)b)", "offset 1: unbalanced ')'"},
           Case{R"([abc)", "offset 4: unterminated character class"},
           Case{R"(*a)", "offset 0: nothing to repeat"},
           Case{R"(a$b)", "'$' before the end"},
           // Found by json_schema_fuzzer: a lead byte F5-F7 decodes past U+10FFFF.
           Case{"a\xf6\xbc\xbc\xbc", "offset 1: invalid UTF-8"},
       }) {
    const auto gbnf = RegexToGbnf(c.regex, GrammarLimits());
    ASSERT_FALSE(gbnf.ok()) << c.regex;
    EXPECT_EQ(gbnf.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(gbnf.status().message(), HasSubstr(c.message)) << c.regex;
  }
}

}  // namespace
}  // namespace tokenmill::grammar
