// The caps of GrammarLimits: over one, compiling fails with RESOURCE_EXHAUSTED naming what the
// request sent and the server flag of the cap, quickly and without building the oversized
// grammar.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "grammar/compiled_grammar.h"
#include "grammar/compiler.h"
#include "grammar/grammar_cache.h"
#include "tests/grammar/test_vocab.h"

namespace tokenmill::grammar {
namespace {

using ::testing::HasSubstr;

Status CompileStatus(GrammarSpec::Kind kind, const std::string& text,
                     const GrammarLimits& limits = GrammarLimits()) {
  GrammarSpec spec;
  spec.kind = kind;
  spec.text = text;
  return CompileGrammar(spec, testing::SmallVocabulary(), limits).status();
}

TEST(GrammarLimitsTest, RepetitionsOverTheCapAreRefusedNamingWhatWasSent) {
  const Status maxlength = CompileStatus(
      GrammarSpec::Kind::kJsonSchema,
      R"({"type": "object", "properties": {"bio": {"type": "string", "maxLength": 1000000}}})");
  EXPECT_EQ(maxlength.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(maxlength.message(),
              HasSubstr("at /properties/bio/maxLength: maxLength 1000000 is over the limit of "
                        "100000: use a smaller maxLength (or raise the server's "
                        "--grammar-max-repetition)"));
  const Status gbnf = CompileStatus(GrammarSpec::Kind::kGbnf, "root ::= \"a\"{1,100001}\n");
  EXPECT_EQ(gbnf.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(gbnf.message(), HasSubstr("line 1:10: repetition bound 100001 is over the limit"));
  const Status regex = CompileStatus(GrammarSpec::Kind::kRegex, "a{1,100001}");
  EXPECT_EQ(regex.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(regex.message(), HasSubstr("offset 1: repetition bound 100001"));
  const Status items = CompileStatus(GrammarSpec::Kind::kJsonSchema,
                                     R"({"type": "array", "minItems": 200000})");
  EXPECT_EQ(items.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(items.message(), HasSubstr("at /minItems: minItems 200000"));
  GrammarLimits small;
  small.max_repetition = 50;
  EXPECT_THAT(CompileStatus(GrammarSpec::Kind::kGbnf, "root ::= \"a\"{51}\n", small).message(),
              HasSubstr("over the limit of 50"));
}

// Bounds up to the cap are a counter, not copies (so they compile as fast as small ones:
// bench/grammar), and the count is exact at both ends.
TEST(GrammarLimitsTest, LargeBoundsCompileQuicklyAndCountExactly) {
  const auto vocab = testing::SmallVocabulary();
  const auto grammar = testing::MustCompile(GrammarSpec::Kind::kGbnf,
                                            "root ::= \"a\"{1,100000} \"!\"\n", vocab);
  const auto schema = testing::MustCompile(
      GrammarSpec::Kind::kJsonSchema, R"({"type": "string", "minLength": 3, "maxLength": 99999})",
      vocab);
  // A copy per iteration would be 10^5 rules (the rule cap is 20000).
  EXPECT_LT(grammar->automaton().rules.size(), 10u);
  GrammarMatcher one(grammar);
  EXPECT_FALSE(one.AcceptBytes("!"));
  EXPECT_TRUE(one.AcceptBytes("a!"));
  EXPECT_TRUE(one.CanTerminate());
  GrammarMatcher all(grammar);
  EXPECT_TRUE(all.AcceptBytes(std::string(100000, 'a')));
  EXPECT_FALSE(all.AcceptBytes("a"));
  EXPECT_TRUE(all.AcceptBytes("!"));
  GrammarMatcher string(schema);
  EXPECT_TRUE(string.AcceptBytes("\"ab"));
  EXPECT_FALSE(string.AcceptBytes("\""));
  EXPECT_TRUE(string.AcceptBytes(std::string(99997, 'x')));
  EXPECT_FALSE(string.AcceptBytes("x"));
  EXPECT_TRUE(string.AcceptBytes("\""));
  EXPECT_TRUE(string.CanTerminate());
}

TEST(GrammarLimitsTest, LongGrammarsHitTheElementCap) {
  std::string gbnf = "root ::=";
  for (int i = 0; i < 200; ++i) gbnf += " \"" + std::string(2000, 'a') + "\"";
  const Status status = CompileStatus(GrammarSpec::Kind::kGbnf, gbnf + "\n");
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--grammar-max-elements"));
}

TEST(GrammarLimitsTest, DeepRefChainsAreRefused) {
  std::string defs;
  const int depth = 500;
  for (int i = 0; i < depth; ++i) {
    defs += "\"d" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/d" + std::to_string(i + 1) + "\"},";
  }
  defs += "\"d" + std::to_string(depth) + "\": {\"type\": \"integer\"}";
  const Status status = CompileStatus(GrammarSpec::Kind::kJsonSchema,
                                      "{\"$defs\": {" + defs + "}, \"$ref\": \"#/$defs/d0\"}");
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("/$defs/d64: nested deeper than 64 subschemas or $refs: "
                                          "flatten the schema (or raise the server's "
                                          "--grammar-max-schema-depth)"));
}

TEST(GrammarLimitsTest, CompileTimeIsCapped) {
  GrammarLimits limits;
  limits.max_compile_time = std::chrono::milliseconds(0);
  const Status status = CompileStatus(GrammarSpec::Kind::kGbnf, "root ::= \"a\"\n", limits);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--grammar-max-compile-ms"));
}

// Found by json_schema_fuzzer (its input, a regex): repeats nested 80 deep around "^", which
// matches the empty string, take exponentially many stacks in one expansion of one position;
// the time limit must hold inside it (it was checked between positions only: this compiled
// for over 20 minutes).
TEST(GrammarLimitsTest, CompileTimeIsCappedInsideOneExpansion) {
  GrammarLimits limits;
  limits.max_compile_time = std::chrono::milliseconds(200);
  const std::string regex = std::string("\x01\0\0\n\0\0\n^^", 9) + std::string(11, '+') + "*" +
                            std::string(69, '+');
  const Status status = CompileStatus(GrammarSpec::Kind::kRegex, regex, limits);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("time limit"));
}

TEST(GrammarCacheTest, CompilesOnceAndEvictsTheLeastRecent) {
  GrammarCache cache(testing::SmallVocabulary(), GrammarLimits(), /*capacity=*/2);
  GrammarSpec a{GrammarSpec::Kind::kGbnf, "root ::= \"a\"\n", {}};
  GrammarSpec b{GrammarSpec::Kind::kRegex, "root ::= \"a\"\n", {}};  // same text, other kind
  GrammarSpec c{GrammarSpec::Kind::kChoice, "", {"x", "y"}};
  const auto first = cache.GetOrCompile(a);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(cache.GetOrCompile(a)->get(), first->get());
  const auto other = cache.GetOrCompile(b);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_NE(other->get(), first->get());
  ASSERT_TRUE(cache.GetOrCompile(c).ok());
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.GetOrCompile(a)->get(), first->get());  // a was evicted, so compiled again
  GrammarSpec bad{GrammarSpec::Kind::kGbnf, "root ::= (", {}};
  EXPECT_EQ(cache.GetOrCompile(bad).status().code(), StatusCode::kInvalidArgument);
}


TEST(GrammarLimitsTest, DeepNestingIsRefusedBeforeRecursingOnIt) {
  const int depth = 20000;
  const Status gbnf = CompileStatus(
      GrammarSpec::Kind::kGbnf,
      "root ::= " + std::string(depth, '(') + "\"a\"" + std::string(depth, ')') + "\n");
  EXPECT_EQ(gbnf.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(gbnf.message(), HasSubstr("groups nest deeper than 200"));
  const Status regex =
      CompileStatus(GrammarSpec::Kind::kRegex, std::string(depth, '(') + "a" + std::string(depth, ')'));
  EXPECT_EQ(regex.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(regex.message(), HasSubstr("groups nest deeper than 200"));
  const Status schema = CompileStatus(
      GrammarSpec::Kind::kJsonSchema,
      "{\"const\": " + std::string(depth, '[') + std::string(depth, ']') + "}");
  // The one bound on JSON from clients (common/json_nesting.h), not an operator's cap.
  EXPECT_EQ(schema.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(schema.message(),
              HasSubstr("JSON Schema nests deeper than 64 levels of lists and objects"));
}


TEST(GrammarLimitsTest, TableMemoryIsCapped) {
  GrammarLimits limits;
  limits.max_table_bytes = 64;
  const Status status = CompileStatus(GrammarSpec::Kind::kJsonObject, "", limits);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--grammar-max-table-mib"));
}

}  // namespace
}  // namespace tokenmill::grammar
