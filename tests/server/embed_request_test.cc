#include "server/grpc/embed_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>

#include "common/request_limits.h"
#include "tests/test_paths.h"

namespace tokenmill::server {
namespace {

using ::testing::HasSubstr;

const Tokenizer& Stories() {
  static const Tokenizer tokenizer = [] {
    StatusOr<GgufFile> file = GgufFile::Open(TestModelsDir() + "/stories260K.gguf");
    TM_CHECK(file.ok()) << file.status().ToString();
    StatusOr<Tokenizer> t = Tokenizer::FromGguf(*file);
    TM_CHECK(t.ok()) << t.status().ToString();
    return std::move(*t);
  }();
  return tokenizer;
}

RequestContext Context(std::string tenant = {}) {
  RequestContext context;
  context.tokenizer = &Stories();
  context.max_model_len = 64;
  context.tenant = std::move(tenant);
  return context;
}

v1::EmbedRequest Texts(std::initializer_list<const char*> texts) {
  v1::EmbedRequest request;
  for (const char* text : texts) request.add_inputs()->set_text(text);
  return request;
}

TEST(BuildEmbedRequests, OneEngineEmbeddingPerInputInOrder) {
  v1::EmbedRequest request = Texts({"Once upon a time", "The cat"});
  v1::TokenIds* ids = request.add_inputs()->mutable_token_ids();
  ids->add_ids(5);
  ids->add_ids(6);
  request.set_raw(true);
  request.set_cache_salt("s");
  StatusOr<std::vector<ValidatedRequest>> built =
      BuildEmbedRequests(request, Context("acme"), Pooling::kLast);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ASSERT_EQ(built->size(), 3u);
  EXPECT_EQ((*built)[0].get().prompt_token_ids, *Stories().Encode("Once upon a time"));
  EXPECT_EQ((*built)[1].get().prompt_token_ids, *Stories().Encode("The cat"));
  EXPECT_EQ((*built)[2].get().prompt_token_ids, (std::vector<TokenId>{5, 6}));
  for (const ValidatedRequest& input : *built) {
    ASSERT_TRUE(input.get().embedding.has_value());
    EXPECT_EQ(input.get().embedding->pooling, Pooling::kLast);
    EXPECT_FALSE(input.get().embedding->normalize);
    EXPECT_EQ(input.get().tenant, "acme");
    EXPECT_EQ(input.get().cache_salt, PrefixCacheSalt("acme", "s", false));
  }
}

TEST(BuildEmbedRequests, AModelThatPoolsNothingNamesTheFlag) {
  for (const Pooling pooling : {Pooling::kNone, Pooling::kRank}) {
    const Status status = BuildEmbedRequests(Texts({"a"}), Context(), pooling).status();
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr("--pooling"));
  }
}

TEST(BuildEmbedRequests, RefusalsNameTheInput) {
  const auto refusal = [](const v1::EmbedRequest& request,
                          StatusCode code = StatusCode::kInvalidArgument) {
    const Status status = BuildEmbedRequests(request, Context(), Pooling::kMean).status();
    EXPECT_EQ(status.code(), code) << status.ToString();
    return status.message();
  };
  EXPECT_THAT(refusal(v1::EmbedRequest()), HasSubstr("inputs has 0 entries"));
  v1::EmbedRequest many;
  for (int i = 0; i <= kMaxEmbedInputs; ++i) many.add_inputs()->set_text("a");
  EXPECT_THAT(refusal(many), HasSubstr("give 1 to 256"));
  EXPECT_THAT(refusal(Texts({"a", ""})), HasSubstr("inputs[1].text is empty"));
  v1::EmbedRequest unset;
  unset.add_inputs();
  EXPECT_THAT(refusal(unset), HasSubstr("inputs[0] has no input"));
  v1::EmbedRequest outside;
  outside.add_inputs()->mutable_token_ids()->add_ids(1);
  outside.mutable_inputs(0)->mutable_token_ids()->add_ids(Stories().vocab_size());
  EXPECT_THAT(refusal(outside), HasSubstr("inputs[0].token_ids.ids[1]"));
  v1::EmbedRequest too_long;  // the context is 64 tokens
  v1::TokenIds* ids = too_long.add_inputs()->mutable_token_ids();
  for (int i = 0; i < 65; ++i) ids->add_ids(5);
  EXPECT_THAT(refusal(too_long, StatusCode::kOutOfRange), HasSubstr("inputs[0]: the prompt"));
}

}  // namespace
}  // namespace tokenmill::server
