// The gateway's bounded JSON body parser: what it accepts at each limit, what it refuses one
// past it and with which message, and that a refused body keeps nothing.
#include <gtest/gtest.h>

#include <string>

#include "gateway/http/request_body.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

// `[item,item,...]` with `count` items.
std::string ListOf(const std::string& item, size_t count) {
  std::string text = "[";
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) text += ',';
    text += item;
  }
  return text + "]";
}

std::string Refusal(const std::string& text) {
  json body;
  const std::optional<HttpError> error = ParseRequestBody(text, body);
  if (!error) return "";
  EXPECT_EQ(error->status, 400);
  EXPECT_EQ(error->type, "invalid_request_error");
  EXPECT_TRUE(body.is_null()) << "a refused body keeps its partial DOM";
  return error->message;
}

TEST(GatewayRequestBody, ParsesAnOrdinaryBody) {
  json body;
  ASSERT_FALSE(ParseRequestBody(R"({"prompt": ["a", [1, 2]], "n": 2, "x": {"y": null}})", body));
  EXPECT_EQ(body, json::parse(R"({"prompt": ["a", [1, 2]], "n": 2, "x": {"y": null}})"));
}

TEST(GatewayRequestBody, TheLargestLegitimateRequestsFit) {
  // 64 prompts of 8192 token ids and logit_bias over the default model's whole vocabulary,
  // in one body: 524288 + 98304 values, 49152 keys.
  json body = {{"prompt", json::array()}, {"logit_bias", json::object()}};
  for (int p = 0; p < 64; ++p) {
    json ids = json::array();
    for (int i = 0; i < 8192; ++i) ids.push_back((p * 8192 + i) % 49152);
    body["prompt"].push_back(std::move(ids));
  }
  for (int id = 0; id < 49152; ++id) body["logit_bias"][std::to_string(id)] = -1;
  const std::string text = body.dump();
  json parsed;
  ASSERT_FALSE(ParseRequestBody(text, parsed));
  EXPECT_EQ(parsed, body);
}

TEST(GatewayRequestBody, ValuesAreCountedUpToTheLimit) {
  // The list itself is a value.
  json body;
  EXPECT_FALSE(ParseRequestBody(ListOf("0", kMaxBodyValues - 1), body));
  EXPECT_EQ(body.size(), kMaxBodyValues - 1);
  const std::string message = Refusal(ListOf("0", kMaxBodyValues));
  EXPECT_NE(message.find("more than 1048576 JSON values"), std::string::npos) << message;
  EXPECT_NE(message.find("send fewer prompts, token ids"), std::string::npos) << message;
  EXPECT_NE(Refusal(ListOf("true", kMaxBodyValues)), "");
  EXPECT_NE(Refusal(ListOf("1.5", kMaxBodyValues)), "");
  EXPECT_NE(Refusal(ListOf("null", kMaxBodyValues)), "");
}

TEST(GatewayRequestBody, StringsListsObjectsAndKeysHaveTheirOwnLimit) {
  const size_t limit = kMaxBodyStringsAndContainers;
  for (const std::string item : {"{}", "[]", "\"\"", "\"abc\""}) {
    json body;
    EXPECT_FALSE(ParseRequestBody(ListOf(item, limit - 1), body)) << item;
    const std::string message = Refusal(ListOf(item, limit));
    EXPECT_NE(message.find("more than 131072 strings, lists and objects"), std::string::npos)
        << item << ": " << message;
  }
  // {"0":0,"1":0,...}: each key counts, its number does not.
  json object = json::object();
  for (size_t i = 0; i + 1 < limit; ++i) object[std::to_string(i)] = 0;
  json body;
  EXPECT_FALSE(ParseRequestBody(object.dump(), body));
  object[std::to_string(limit)] = 0;
  EXPECT_NE(Refusal(object.dump()), "");
}

TEST(GatewayRequestBody, NestingIsLimited) {
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  json body;
  EXPECT_FALSE(ParseRequestBody(nested(kMaxBodyNesting), body));
  EXPECT_EQ(Refusal(nested(kMaxBodyNesting + 1)),
            "the request body nests deeper than 64 levels of lists and objects");
  EXPECT_NE(Refusal(nested(100000)), "");
}

TEST(GatewayRequestBody, NotJsonIsRefused) {
  for (const std::string text : {"", "{", "{} x", "[1,]", "{\"a\" 1}", "\xff"}) {
    EXPECT_EQ(Refusal(text), "the request body is not valid JSON") << text;
  }
}

}  // namespace
}  // namespace tokenmill::gateway
