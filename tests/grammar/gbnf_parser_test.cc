#include "grammar/gbnf_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "grammar/lowering.h"

namespace tokenmill::grammar {
namespace {

using ::testing::HasSubstr;

TEST(GbnfParserTest, ParsesRulesAlternativesGroupsAndRepetitions) {
  const auto parsed = ParseGbnf(
      "# a comment\nroot ::= \"a\" | b+ (\"c\" [d-f]){2,3}\nb ::= [^x\\n]? . # trailing\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->rules.size(), 2u);
  EXPECT_EQ(parsed->rules[0].name, "root");
  ASSERT_EQ(parsed->rules[0].alternatives.size(), 2u);
  const auto& second = parsed->rules[0].alternatives[1];
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].kind, GbnfItem::Kind::kRuleRef);
  EXPECT_EQ(second[0].min_repeat, 1);
  EXPECT_EQ(second[0].max_repeat, kUnbounded);
  EXPECT_EQ(second[1].kind, GbnfItem::Kind::kGroup);
  EXPECT_EQ(second[1].min_repeat, 2);
  EXPECT_EQ(second[1].max_repeat, 3);
  const auto& b = parsed->rules[1].alternatives[0];
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(b[0].char_class.negated);
  EXPECT_EQ(b[0].max_repeat, 1);
  EXPECT_EQ(b[0].min_repeat, 0);
  EXPECT_TRUE(b[1].char_class.negated);  // '.'
  EXPECT_TRUE(b[1].char_class.ranges.empty());
}

TEST(GbnfParserTest, DecodesEscapesAndUtf8) {
  const auto parsed = ParseGbnf("root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600é\" [α-ω]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const auto& items = parsed->rules[0].alternatives[0];
  EXPECT_EQ(items[0].literal, "\n\t\\\"A\xC3\xA9\xF0\x9F\x98\x80\xC3\xA9");
  ASSERT_EQ(items[1].char_class.ranges.size(), 1u);
  EXPECT_EQ(items[1].char_class.ranges[0].first, 0x3B1u);
  EXPECT_EQ(items[1].char_class.ranges[0].second, 0x3C9u);
}

TEST(GbnfParserTest, ErrorsNameTheLineAndColumn) {
  struct Case {
    const char* source;
    const char* message;
  };
  for (const Case& c : {
           Case{"root ::= \"abc", "line 1:14: unterminated string literal"},
           Case{"root ::= a\n\nb = \"x\"", "line 3:3: unexpected character"},
           Case{"root ::= [z-a]", "line 1:11: character range is out of order"},
           Case{"root ::= (\"a\"", "line 1:14: expected ')'"},
           Case{"root ::= \"a\"{3,1}", "line 1:18: repetition {m,n} with n < m"},
           Case{"root ::= \"\\q\"", "line 1:12: unknown escape '\\q'"},
           Case{"root ::= \"a\" )", "line 1:14: ')' without a matching '('"},
       }) {
    const auto parsed = ParseGbnf(c.source);
    ASSERT_FALSE(parsed.ok()) << c.source;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message)) << c.source;
  }
}

TEST(GbnfLoweringTest, RefusesUndefinedRulesMissingRootAndLeftRecursion) {
  const auto lower = [](const char* source) {
    const auto parsed = ParseGbnf(source);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    return LowerGrammar(*parsed, GrammarLimits()).status();
  };
  EXPECT_THAT(lower("root ::= item\n").message(), HasSubstr("line 1:10: undefined rule 'item'"));
  EXPECT_THAT(lower("start ::= \"a\"\n").message(), HasSubstr("no 'root' rule"));
  EXPECT_THAT(lower("root ::= root \"a\" | \"b\"\n").message(),
              HasSubstr("rule 'root' is left-recursive"));
  EXPECT_THAT(lower("root ::= x \"a\"\nx ::= \"b\"? root\n").message(),
              HasSubstr("left-recursive"));
  EXPECT_THAT(lower("root ::= \"a\"\nroot ::= \"b\"\n").message(), HasSubstr("defined twice"));
  // A nullable loop through last references only is fine.
  EXPECT_TRUE(lower("root ::= (\"a\"?)* \"b\"\n").ok());
}

}  // namespace
}  // namespace tokenmill::grammar
