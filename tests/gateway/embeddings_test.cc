// /v1/embeddings: OpenAI's body -> one Embed call, the dimensions check, and the response in
// both encodings (floats that parse back to the same float32s; base64 of their bytes).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/request_limits.h"
#include "gateway/api/openai/embeddings.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

EmbedCall ParseOk(const json& body) {
  EmbedCall call;
  const std::optional<HttpError> error = ParseEmbeddingsRequest(body, call);
  EXPECT_FALSE(error.has_value()) << (error ? error->message : "");
  return call;
}

HttpError ParseError(const json& body) {
  EmbedCall call;
  std::optional<HttpError> error = ParseEmbeddingsRequest(body, call);
  EXPECT_TRUE(error.has_value()) << body.dump();
  return error.value_or(HttpError{});
}

TEST(GatewayEmbeddings, EveryInputShapeBecomesOneEmbedCall) {
  EmbedCall one = ParseOk({{"input", "hello"}, {"model", "m"}});
  EXPECT_EQ(one.model, "m");
  ASSERT_EQ(one.request.inputs_size(), 1);
  EXPECT_EQ(one.request.inputs(0).text(), "hello");
  EXPECT_FALSE(one.request.raw());  // normalized, as OpenAI's are
  EXPECT_FALSE(one.base64);

  const EmbedCall texts = ParseOk({{"input", {"a", "b", "c"}}});
  ASSERT_EQ(texts.request.inputs_size(), 3);
  EXPECT_EQ(texts.request.inputs(2).text(), "c");
  EXPECT_EQ(texts.model, "");

  const EmbedCall ids = ParseOk({{"input", {1, 2, 3}}});
  ASSERT_EQ(ids.request.inputs_size(), 1);
  EXPECT_EQ(ids.request.inputs(0).token_ids().ids_size(), 3);

  const EmbedCall lists = ParseOk({{"input", json::array({{1, 2}, json::array({3})})}});
  ASSERT_EQ(lists.request.inputs_size(), 2);
  EXPECT_EQ(lists.request.inputs(1).token_ids().ids(0), 3);
}

TEST(GatewayEmbeddings, OptionalFields) {
  const EmbedCall call = ParseOk({{"input", "x"},
                                  {"encoding_format", "base64"},
                                  {"dimensions", 8},
                                  {"user", "u-1"},
                                  {"cache_salt", "s"}});
  EXPECT_TRUE(call.base64);
  EXPECT_EQ(call.dimensions, 8);
  EXPECT_EQ(call.request.cache_salt(), "s");
  EXPECT_FALSE(ParseOk({{"input", "x"}, {"encoding_format", "float"}}).base64);
  // null is "not given".
  EXPECT_FALSE(ParseOk({{"input", "x"}, {"dimensions", nullptr}}).dimensions.has_value());
}

TEST(GatewayEmbeddings, RefusalsSayWhatToChange) {
  EXPECT_EQ(ParseError({{"model", "m"}}).param, "input");
  EXPECT_EQ(ParseError({{"input", ""}}).message,
            "input is empty: each input needs at least one token");
  EXPECT_EQ(ParseError({{"input", json::array()}}).message, "input is empty");
  EXPECT_EQ(ParseError({{"input", {"a", ""}}}).message,
            "input[1] is empty: each input needs at least one token");
  EXPECT_EQ(ParseError({{"input", json::array({json::array()})}}).param, "input");
  EXPECT_EQ(ParseError({{"input", json::array({-1})}}).param, "input");
  EXPECT_EQ(ParseError({{"input", json::array({json::array({"a"})})}}).param, "input");
  EXPECT_EQ(ParseError({{"input", 5}}).param, "input");
  EXPECT_EQ(ParseError({{"input", json::array({true})}}).param, "input");

  const json many(std::vector<std::string>(kMaxEmbedInputs + 1, "x"));
  const HttpError too_many = ParseError({{"input", many}});
  EXPECT_EQ(too_many.param, "input");
  EXPECT_NE(too_many.message.find("split them"), std::string::npos) << too_many.message;
  ParseOk({{"input", json(std::vector<std::string>(kMaxEmbedInputs, "x"))}});

  EXPECT_EQ(ParseError({{"input", "x"}, {"encoding_format", "int8"}}).param, "encoding_format");
  EXPECT_EQ(ParseError({{"input", "x"}, {"dimensions", 0}}).param, "dimensions");
  EXPECT_EQ(ParseError({{"input", "x"}, {"dimensions", "8"}}).param, "dimensions");
  EXPECT_EQ(ParseError({{"input", "x"}, {"model", 3}}).param, "model");
  EXPECT_EQ(ParseError({{"input", "x"}, {"user", 3}}).param, "user");
  EXPECT_EQ(ParseError({{"input", "x"}, {"truncate", true}}).param, "truncate");
  EXPECT_EQ(ParseError(json::array()).status, 400);
}

TEST(GatewayEmbeddings, DimensionsMustBeTheModelsWidth) {
  v1::ModelInfo info;
  info.set_embedding_length(1024);
  EmbedCall call = ParseOk({{"input", "x"}});
  EXPECT_FALSE(CheckDimensions(info, call));
  call.dimensions = 1024;
  EXPECT_FALSE(CheckDimensions(info, call));
  call.dimensions = 256;
  const std::optional<HttpError> refused = CheckDimensions(info, call);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(refused->param, "dimensions");
  EXPECT_EQ(refused->message,
            "this model does not support matryoshka dimensions: omit dimensions or pass 1024");
}

TEST(GatewayEmbeddings, Base64IsTheLittleEndianFloat32Bytes) {
  // Python: base64.b64encode(struct.pack("<3f", 1.0, -2.0, 0.5)).
  const std::vector<float> values = {1.0f, -2.0f, 0.5f};
  EXPECT_EQ(Float32Base64(values), "AACAPwAAAMAAAAA/");
  EXPECT_EQ(Float32Base64(std::vector<float>{1.0f}), "AACAPw==");
  EXPECT_EQ(Float32Base64({}), "");
}

TEST(GatewayEmbeddings, ResponseInBothEncodings) {
  const std::vector<float> values = {0.1f,
                                     -1.0f / 3.0f,
                                     std::numeric_limits<float>::min(),
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::max(),
                                     0.0f};
  v1::EmbedResponse response;
  for (uint32_t tokens : {3u, 4u}) {
    v1::Embedding& embedding = *response.add_embeddings();
    embedding.mutable_values()->Add(values.begin(), values.end());
    embedding.set_prompt_tokens(tokens);
  }
  EmbedCall call = ParseOk({{"input", {"a", "b"}}});
  // Through text, as a client reads it: every value parses back to the same float32.
  const json floats = json::parse(EmbeddingsJson(call, "m", response).dump());
  EXPECT_EQ(floats["object"], "list");
  EXPECT_EQ(floats["model"], "m");
  EXPECT_EQ(floats["usage"], json({{"prompt_tokens", 7}, {"total_tokens", 7}}));
  ASSERT_EQ(floats["data"].size(), 2u);
  EXPECT_EQ(floats["data"][1]["object"], "embedding");
  EXPECT_EQ(floats["data"][1]["index"], 1);
  const json& numbers = floats["data"][1]["embedding"];
  ASSERT_EQ(numbers.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(static_cast<float>(numbers[i].get<double>()), values[i]) << numbers[i].dump();
  }

  call.base64 = true;
  const json encoded = EmbeddingsJson(call, "m", response);
  EXPECT_EQ(encoded["data"][0]["embedding"], Float32Base64(values));
}

}  // namespace
}  // namespace tokenmill::gateway
