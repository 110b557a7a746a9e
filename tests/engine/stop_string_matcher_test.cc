// Stop strings on streamed text: what is emitted, what is held back, and where it stops.
#include "engine/stop_string_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tokenmill {
namespace {

// Feeds the pieces; returns everything emitted (Flush included unless a stop matched) and
// the matched index (-1 for none).
std::pair<std::string, int> Stream(std::vector<std::string> stops,
                                   const std::vector<std::string>& pieces) {
  StopStringMatcher matcher(std::move(stops));
  std::string emitted;
  for (const std::string& piece : pieces) {
    StopStringMatcher::Result r = matcher.Add(piece);
    emitted += r.text;
    if (r.matched) return {emitted, static_cast<int>(*r.matched)};
  }
  return {emitted + matcher.Flush(), -1};
}

TEST(StopStringMatcherTest, NoStopStringsPassesTextThrough) {
  StopStringMatcher matcher({});
  EXPECT_EQ(matcher.Add("hello").text, "hello");
  EXPECT_EQ(matcher.held_bytes(), 0u);
}

TEST(StopStringMatcherTest, StopSplitAcrossPiecesIsNeverEmitted) {
  StopStringMatcher matcher({"END"});
  EXPECT_EQ(matcher.Add("abc E").text, "abc ");  // "E" may start END
  EXPECT_EQ(matcher.held_bytes(), 1u);
  EXPECT_EQ(matcher.Add("N").text, "");
  StopStringMatcher::Result r = matcher.Add("Dxyz");
  EXPECT_EQ(r.text, "");
  ASSERT_TRUE(r.matched);
  EXPECT_EQ(*r.matched, 0u);
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  EXPECT_EQ(Stream({"END"}, {"E", "N", "d", "!"}), std::make_pair(std::string("ENd!"), -1));
  StopStringMatcher matcher({"END"});
  EXPECT_EQ(matcher.Add("EN").text, "");
  EXPECT_EQ(matcher.Add("X").text, "ENX");
}

TEST(StopStringMatcherTest, TextBeforeTheStopInTheSamePieceIsEmitted) {
  EXPECT_EQ(Stream({"\n\n"}, {"one", " two\n", "\nthree"}),
            std::make_pair(std::string("one two"), 0));
}

TEST(StopStringMatcherTest, EarliestMatchWinsThenTheLonger) {
  EXPECT_EQ(Stream({"cd", "b"}, {"abcd"}), std::make_pair(std::string("a"), 1));
  EXPECT_EQ(Stream({"ab", "abc"}, {"xabcz"}), std::make_pair(std::string("x"), 1));
}

TEST(StopStringMatcherTest, HoldsTheLongestTailThatStartsAnyStop) {
  StopStringMatcher matcher({"xyz", "yzw!"});
  EXPECT_EQ(matcher.Add("ayz").text, "a");  // "yz" starts yzw!
  EXPECT_EQ(matcher.held_bytes(), 2u);
  EXPECT_EQ(matcher.Flush(), "yz");
}

TEST(StopStringMatcherTest, RepeatedPrefixCharacters) {
  // "aab" must be found although the held tail "aa" first looked like a false start.
  EXPECT_EQ(Stream({"aab"}, {"a", "a", "a", "b"}), std::make_pair(std::string("a"), 0));
}

TEST(StopStringMatcherTest, MultiByteCharactersAreNeverSplit) {
  // The held tail is a prefix of a valid UTF-8 stop string, so it starts on a character.
  StopStringMatcher matcher({"né!"});
  EXPECT_EQ(matcher.Add("café n").text, "café ");
  EXPECT_EQ(matcher.Add("é").text, "");
  EXPECT_EQ(matcher.Add("e").text, "née");
}

}  // namespace
}  // namespace tokenmill
