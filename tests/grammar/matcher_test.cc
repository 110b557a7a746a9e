#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include "grammar/compiled_grammar.h"
#include "tests/grammar/test_vocab.h"

namespace tokenmill::grammar {
namespace {

using testing::Allowed;
using testing::MaskOf;
using testing::MustCompile;
using testing::SmallVocabulary;
using testing::TokenOf;

// The mask says, for every token, whether a copy of the matcher accepts the token's bytes:
// the precomputed tables and the dependent walk against direct stepping.
void ExpectMaskMatchesStepping(const GrammarMatcher& matcher, const VocabularyIndex& vocab) {
  const std::vector<uint32_t> mask = MaskOf(matcher);
  for (size_t t = 0; t < vocab.size(); ++t) {
    const int32_t token = static_cast<int32_t>(t);
    GrammarMatcher copy = matcher;
    const bool accepts = vocab.is_eos(token) ? matcher.CanTerminate()
                                             : !vocab.token(token).empty() && copy.AcceptToken(token);
    EXPECT_EQ(Allowed(mask, token), accepts) << "token '" << vocab.token(token) << "'";
  }
}

TEST(GrammarMatcherTest, MasksAgreeWithSteppingEveryTokenAlongAJsonObject) {
  const auto vocab = SmallVocabulary();
  GrammarMatcher matcher(MustCompile(GrammarSpec::Kind::kJsonObject, "", vocab));
  for (const char* piece : {"{\"", "a", "\":", " ", "[", "12", ",", " \"", "é", "\xC3", "\xA9",
                            "€", "\"", "]", ",", " \"", "b", "\":", " ", "null", "}"}) {
    ExpectMaskMatchesStepping(matcher, *vocab);
    const int32_t token = TokenOf(*vocab, piece);
    ASSERT_GE(token, 0) << piece;
    ASSERT_TRUE(matcher.AcceptToken(token)) << piece;
  }
  EXPECT_TRUE(matcher.CanTerminate());
  EXPECT_TRUE(matcher.IsTerminated());  // nothing may follow the closing brace
  ExpectMaskMatchesStepping(matcher, *vocab);
}

TEST(GrammarMatcherTest, EosOnlyWhereTheGrammarEndsAndNothingAfterIt) {
  const auto vocab = SmallVocabulary();
  GrammarMatcher matcher(MustCompile(GrammarSpec::Kind::kGbnf, "root ::= \"a\"+\n", vocab));
  const int32_t eos = 1;
  EXPECT_FALSE(matcher.CanTerminate());
  EXPECT_FALSE(Allowed(MaskOf(matcher), eos));
  EXPECT_FALSE(matcher.AcceptToken(eos));
  ASSERT_TRUE(matcher.AcceptToken(TokenOf(*vocab, "a")));
  EXPECT_TRUE(Allowed(MaskOf(matcher), eos));
  EXPECT_FALSE(matcher.IsTerminated());
  ASSERT_TRUE(matcher.AcceptToken(eos));
  EXPECT_TRUE(matcher.IsTerminated());
  EXPECT_FALSE(matcher.CanTerminate());
  for (const uint32_t word : MaskOf(matcher)) EXPECT_EQ(word, 0u);
  EXPECT_FALSE(matcher.AcceptToken(TokenOf(*vocab, "a")));
}

TEST(GrammarMatcherTest, SpecialTokensAreNeverAllowed) {
  const auto vocab = SmallVocabulary();
  GrammarMatcher matcher(MustCompile(GrammarSpec::Kind::kGbnf, "root ::= [^x]*\n", vocab));
  EXPECT_FALSE(Allowed(MaskOf(matcher), 0));
  EXPECT_FALSE(matcher.AcceptToken(0));
}

TEST(GrammarMatcherTest, RejectedTokenLeavesTheStateAndRollbackUndoes) {
  const auto vocab = SmallVocabulary();
  GrammarMatcher matcher(
      MustCompile(GrammarSpec::Kind::kGbnf, "root ::= \"ab\" \"c\"* | \"yes\"\n", vocab));
  const std::vector<uint32_t> start = MaskOf(matcher);
  EXPECT_FALSE(matcher.AcceptToken(TokenOf(*vocab, "no")));
  EXPECT_EQ(MaskOf(matcher), start);
  EXPECT_EQ(matcher.num_accepted_tokens(), 0);
  ASSERT_TRUE(matcher.AcceptToken(TokenOf(*vocab, "ab")));
  const std::vector<uint32_t> after_ab = MaskOf(matcher);
  ASSERT_TRUE(matcher.AcceptToken(TokenOf(*vocab, "c")));
  ASSERT_TRUE(matcher.AcceptToken(TokenOf(*vocab, "c")));
  EXPECT_EQ(matcher.num_accepted_tokens(), 3);
  matcher.Rollback(2);
  EXPECT_EQ(MaskOf(matcher), after_ab);
  matcher.Rollback(1);
  EXPECT_EQ(MaskOf(matcher), start);
  ASSERT_TRUE(matcher.AcceptToken(TokenOf(*vocab, "yes")));
  EXPECT_TRUE(matcher.IsTerminated());
}

TEST(GrammarMatcherTest, DuplicateTokensShareTheirDecision) {
  const auto vocab = SmallVocabulary();  // "ab" twice
  ASSERT_EQ(vocab->duplicates().size(), 1u);
  const auto [dup, first] = vocab->duplicates()[0];
  for (const char* grammar : {"root ::= \"ab\"\n", "root ::= [^\"]*\n"}) {
    GrammarMatcher matcher(MustCompile(GrammarSpec::Kind::kGbnf, grammar, vocab));
    const std::vector<uint32_t> mask = MaskOf(matcher);
    EXPECT_TRUE(Allowed(mask, first)) << grammar;
    EXPECT_TRUE(Allowed(mask, dup)) << grammar;
  }
}

TEST(GrammarMatcherTest, TokensMayEndInsideAUtf8Character) {
  const auto vocab = SmallVocabulary();
  GrammarMatcher matcher(MustCompile(GrammarSpec::Kind::kGbnf, "root ::= [é€]\n", vocab));
  const std::vector<uint32_t> mask = MaskOf(matcher);
  EXPECT_TRUE(Allowed(mask, TokenOf(*vocab, "\xC3")));   // é's first byte
  EXPECT_FALSE(Allowed(mask, TokenOf(*vocab, "\xA9")));  // a continuation byte alone
  EXPECT_TRUE(Allowed(mask, TokenOf(*vocab, "€")));
  ASSERT_TRUE(matcher.AcceptToken(TokenOf(*vocab, "\xC3")));
  ASSERT_TRUE(matcher.AcceptToken(TokenOf(*vocab, "\xA9")));
  EXPECT_TRUE(matcher.CanTerminate());
}

}  // namespace
}  // namespace tokenmill::grammar
