// The caps of GrammarLimits: over one, compiling fails with RESOURCE_EXHAUSTED naming what the
// request sent and the server flag of the cap, quickly and without building the oversized
// grammar.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
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

// What the cache counts for one grammar: its compiled memory and its key.
int64_t CachedBytes(const GrammarSpec& spec) {
  GrammarCache alone(testing::SmallVocabulary(), GrammarLimits());
  EXPECT_TRUE(alone.GetOrCompile(spec).ok());
  return alone.stats().bytes;
}

TEST(GrammarCacheTest, CompilesOnceAndEvictsTheLeastRecentPastItsBudget) {
  GrammarSpec a{GrammarSpec::Kind::kGbnf, "root ::= \"a\"\n", {}};
  GrammarSpec b{GrammarSpec::Kind::kRegex, "root ::= \"a\"\n", {}};  // same text, other kind
  GrammarSpec c{GrammarSpec::Kind::kChoice, "", {"x", "y"}};
  const int64_t budget = std::max(CachedBytes(a) + CachedBytes(b),
                                  std::max(CachedBytes(b), CachedBytes(a)) + CachedBytes(c));
  ASSERT_LT(budget, CachedBytes(a) + CachedBytes(b) + CachedBytes(c));
  GrammarCache cache(testing::SmallVocabulary(), GrammarLimits(), budget);
  const auto first = cache.GetOrCompile(a);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(cache.GetOrCompile(a)->get(), first->get());
  const auto other = cache.GetOrCompile(b);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_NE(other->get(), first->get());
  ASSERT_TRUE(cache.GetOrCompile(c).ok());
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_LE(cache.stats().bytes, budget);
  EXPECT_EQ(cache.stats().evictions, 1u);
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


// Nine optional printable characters, then a literal: where each optional may end, nearly
// every token of the vocabulary runs past it, so each position keeps most of the vocabulary
// as context-dependent tokens (4 bytes of id and 2 of shared prefix each). 100 such rules,
// 2.6 KB of GBNF, grew the server by ~200 MiB (SmolLM2's 49152 tokens): the size each
// compiled grammar reports must cover its tables, and the cache must bound their sum.
std::string WideOptionalsGbnf(int rules) {
  std::string gbnf = "root ::=";
  for (int i = 0; i < rules; ++i) gbnf.append(" r").append(std::to_string(i));
  gbnf.append("\n");
  for (int i = 0; i < rules; ++i) {
    const std::string n = std::to_string(i);
    gbnf.append("r").append(n).append(" ::= [ -~]{0,8} \"").append(n).append("\" [ -~]{0,8}\n");
  }
  return gbnf;
}

TEST(GrammarCacheTest, MemoryBytesCoverTheTokenTables) {
  const auto compiled = CompileGrammar({GrammarSpec::Kind::kGbnf, WideOptionalsGbnf(4), {}},
                                       testing::SmallVocabulary(), GrammarLimits());
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const CompiledGrammar& g = **compiled;
  int64_t tables = 0;
  for (int32_t pos = 0; pos < static_cast<int32_t>(g.automaton().elements.size()); ++pos) {
    if (!g.automaton().IsBytePosition(pos)) continue;
    const PositionTokens& t = g.tokens_at(pos);
    tables += static_cast<int64_t>(sizeof(PositionTokens) +
                                   4 * (t.list.size() + t.dependent.size() +
                                        t.accepted_mask.size() + t.accepted_in_order.size()) +
                                   2 * (t.dependent_lcp.size() + t.accepted_lcp.size()));
  }
  EXPECT_GT(tables, 0);
  EXPECT_GE(g.memory_bytes(), tables);
  EXPECT_LT(g.memory_bytes(), tables + (int64_t{1} << 20));  // the automaton is small
}

TEST(GrammarCacheTest, ManyLargeGrammarsStayWithinTheBudget) {
  const int64_t one = CachedBytes({GrammarSpec::Kind::kGbnf, WideOptionalsGbnf(8), {}});
  GrammarCache cache(testing::SmallVocabulary(), GrammarLimits(), 3 * one + one / 2);
  for (int i = 0; i < 10; ++i) {  // distinct bodies of about the same size
    GrammarSpec spec{GrammarSpec::Kind::kGbnf, WideOptionalsGbnf(8), {}};
    spec.text.append("# ").append(std::to_string(i)).append("\n");
    ASSERT_TRUE(cache.GetOrCompile(spec).ok());
    EXPECT_LE(cache.stats().bytes, cache.stats().budget_bytes);
  }
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_EQ(cache.stats().evictions, 7u);
}

TEST(GrammarCacheTest, AGrammarLargerThanTheBudgetIsServedButNotKept) {
  const GrammarSpec spec{GrammarSpec::Kind::kGbnf, WideOptionalsGbnf(8), {}};
  GrammarCache cache(testing::SmallVocabulary(), GrammarLimits(), CachedBytes(spec) / 2);
  ASSERT_TRUE(cache.GetOrCompile(spec).ok());
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().bytes, 0);
}

TEST(GrammarLimitsTest, OneGrammarsMemoryIsCappedBeforeItIsAllTaken) {
  const GrammarSpec spec{GrammarSpec::Kind::kGbnf, WideOptionalsGbnf(8), {}};
  GrammarLimits limits;
  limits.max_table_bytes = CachedBytes(spec) / 4;
  const auto compiled = CompileGrammar(spec, testing::SmallVocabulary(), limits);
  EXPECT_EQ(compiled.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(compiled.status().message(), HasSubstr("--grammar-max-table-mib"));
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
