#include "common/json_nesting.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

namespace tokenmill {
namespace {

std::string Nested(int levels) {
  std::string text;
  for (int i = 0; i < levels; ++i) text += "{\"a\":[";
  text += "1";
  for (int i = 0; i < levels; ++i) text += "]}";
  return text;
}

TEST(JsonNestingTest, TextCountsListsAndObjectsOutsideStrings) {
  EXPECT_FALSE(JsonTextNestsDeeperThan("1", 0));
  EXPECT_TRUE(JsonTextNestsDeeperThan("{}", 0));
  EXPECT_FALSE(JsonTextNestsDeeperThan("{}", 1));
  EXPECT_TRUE(JsonTextNestsDeeperThan("{\"a\":[1]}", 1));
  EXPECT_FALSE(JsonTextNestsDeeperThan("{\"a\":[1]}", 2));
  EXPECT_FALSE(JsonTextNestsDeeperThan("[[],[],[]]", 2));
  // Brackets inside strings, escaped quotes included, are text.
  EXPECT_FALSE(JsonTextNestsDeeperThan(R"({"[[[[": "\"{{{{"})", 1));
  EXPECT_FALSE(JsonTextNestsDeeperThan(Nested(32)));  // 64 levels
  EXPECT_TRUE(JsonTextNestsDeeperThan(Nested(33)));
}

TEST(JsonNestingTest, ParsedValueAgreesWithText) {
  for (int levels : {0, 1, 31, 32, 33, 50000}) {
    const std::string text = Nested(levels);
    const nlohmann::json parsed = nlohmann::json::parse(text);
    EXPECT_EQ(JsonNestsDeeperThan(parsed), JsonTextNestsDeeperThan(text)) << levels;
    EXPECT_EQ(JsonNestsDeeperThan(nlohmann::ordered_json::parse(text)), levels > 32) << levels;
  }
}

TEST(JsonNestingTest, RefusalNamesTheFieldAndTheLimit) {
  EXPECT_EQ(JsonNestingRefusal("chat.tools_json"),
            "chat.tools_json nests deeper than 64 levels of lists and objects");
}

}  // namespace
}  // namespace tokenmill
