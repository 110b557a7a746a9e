// The caps of GrammarLimits: over one, compiling fails with RESOURCE_EXHAUSTED naming it,
// quickly and without building the oversized grammar.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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

TEST(GrammarLimitsTest, HugeRepetitionsAreRefused) {
  const Status maxlength = CompileStatus(GrammarSpec::Kind::kJsonSchema,
                                         R"({"type": "string", "maxLength": 1000000})");
  EXPECT_EQ(maxlength.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(maxlength.message(), HasSubstr("at /maxLength: maxLength 1000000 is over the limit"));
  const Status gbnf = CompileStatus(GrammarSpec::Kind::kGbnf, "root ::= \"a\"{1,100000}\n");
  EXPECT_EQ(gbnf.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(gbnf.message(), HasSubstr("line 1:10: repetition bound 100000 is over the limit"));
  const Status regex = CompileStatus(GrammarSpec::Kind::kRegex, "a{1,100000}");
  EXPECT_EQ(regex.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(regex.message(), HasSubstr("offset 1: repetition bound 100000"));
  const Status items = CompileStatus(GrammarSpec::Kind::kJsonSchema,
                                     R"({"type": "array", "minItems": 5000})");
  EXPECT_EQ(items.code(), StatusCode::kResourceExhausted);
}

TEST(GrammarLimitsTest, LongGrammarsHitTheElementCap) {
  std::string gbnf = "root ::=";
  for (int i = 0; i < 200; ++i) gbnf += " \"" + std::string(2000, 'a') + "\"";
  const Status status = CompileStatus(GrammarSpec::Kind::kGbnf, gbnf + "\n");
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("max_elements"));
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
  EXPECT_THAT(status.message(), HasSubstr("max_schema_depth"));
}

TEST(GrammarLimitsTest, CompileTimeIsCapped) {
  GrammarLimits limits;
  limits.max_compile_time = std::chrono::milliseconds(0);
  const Status status = CompileStatus(GrammarSpec::Kind::kGbnf, "root ::= \"a\"\n", limits);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("max_compile_time"));
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
  EXPECT_EQ(schema.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(schema.message(), HasSubstr("nests arrays and objects deeper than"));
}


TEST(GrammarLimitsTest, TableMemoryIsCapped) {
  GrammarLimits limits;
  limits.max_table_bytes = 64;
  const Status status = CompileStatus(GrammarSpec::Kind::kJsonObject, "", limits);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("max_table_bytes"));
}

}  // namespace
}  // namespace tokenmill::grammar
