// /v1/rerank: the body (documents as strings or {"text"} objects, top_n, return_documents) ->
// one Rerank call, and the reply ranked by relevance_score (stable), cut to top_n, in vLLM's
// and Jina's shape.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/request_limits.h"
#include "gateway/api/openai/rerank.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

RerankCall ParseOk(const json& body) {
  RerankCall call;
  const std::optional<HttpError> error = ParseRerankRequest(body, call);
  EXPECT_FALSE(error.has_value()) << (error ? error->message : "");
  return call;
}

HttpError ParseError(const json& body) {
  RerankCall call;
  std::optional<HttpError> error = ParseRerankRequest(body, call);
  EXPECT_TRUE(error.has_value()) << body.dump();
  return error.value_or(HttpError{});
}

json Body(json documents) { return {{"query", "q"}, {"documents", std::move(documents)}}; }

TEST(GatewayRerank, StringsAndTextObjectsBecomeOneRerankCall) {
  const RerankCall call = ParseOk({{"model", "m"},
                                   {"query", "what is a panda?"},
                                   {"documents", {"hi", {{"text", "pandas are bears"}}}}});
  EXPECT_EQ(call.model, "m");
  EXPECT_EQ(call.request.query(), "what is a panda?");
  ASSERT_EQ(call.request.documents_size(), 2);
  EXPECT_EQ(call.request.documents(0), "hi");
  EXPECT_EQ(call.request.documents(1), "pandas are bears");
  EXPECT_FALSE(call.top_n.has_value());
  EXPECT_TRUE(call.return_documents);
  EXPECT_EQ(call.request.request_id(), "");  // the route names it, not the parse
  EXPECT_EQ(ParseOk(Body({"a"})).model, "");
}

TEST(GatewayRerank, OptionalFields) {
  json body = Body({"a", "b"});
  body.update({{"top_n", 1}, {"return_documents", false}, {"user", "u"}, {"cache_salt", "s"}});
  const RerankCall call = ParseOk(body);
  EXPECT_EQ(call.top_n, 1);
  EXPECT_FALSE(call.return_documents);
  EXPECT_EQ(call.request.cache_salt(), "s");
  // null is "not given"; top_n may exceed the documents (all are kept).
  body.update({{"top_n", nullptr}, {"return_documents", nullptr}});
  EXPECT_FALSE(ParseOk(body).top_n.has_value());
  EXPECT_TRUE(ParseOk(body).return_documents);
  body["top_n"] = 10;
  EXPECT_EQ(ParseOk(body).top_n, 10);
}

TEST(GatewayRerank, RefusalsNameTheField) {
  EXPECT_EQ(ParseError({{"documents", {"a"}}}).message, "query is required");
  EXPECT_EQ(ParseError({{"query", ""}, {"documents", {"a"}}}).param, "query");
  EXPECT_EQ(ParseError({{"query", 3}, {"documents", {"a"}}}).param, "query");
  EXPECT_EQ(ParseError({{"query", "q"}}).message, "documents is required");
  EXPECT_EQ(ParseError(Body(json::array())).message, "documents is empty");
  EXPECT_EQ(ParseError(Body("a")).param, "documents");
  EXPECT_EQ(ParseError(Body({"a", ""})).message, "documents[1] is empty");
  EXPECT_EQ(ParseError(Body({"a", 5})).param, "documents");
  EXPECT_EQ(ParseError(Body({"a", 5})).message,
            "documents[1] must be a string or an object {\"text\": \"...\"}");
  EXPECT_EQ(ParseError(Body({json::object()})).param, "documents");
  EXPECT_EQ(ParseError(Body({{{"text", 1}}})).param, "documents");
  EXPECT_EQ(ParseError(Body({{{"text", ""}}})).message, "documents[0] is empty");
  EXPECT_EQ(ParseError(Body({{{"text", "t"}, {"title", "x"}}})).message,
            "documents[0].title is not supported: each document is a string or an object "
            "{\"text\": \"...\"}");

  const HttpError too_many = ParseError(Body(std::vector<std::string>(kMaxEmbedInputs + 1, "x")));
  EXPECT_EQ(too_many.param, "documents");
  EXPECT_NE(too_many.message.find("split them"), std::string::npos) << too_many.message;
  ParseOk(Body(std::vector<std::string>(kMaxEmbedInputs, "x")));

  json body = Body({"a"});
  for (const json& top_n : {json(0), json(-1), json("2"), json(1.5)}) {
    body["top_n"] = top_n;
    EXPECT_EQ(ParseError(body).param, "top_n") << top_n;
  }
  body = Body({"a"});
  body["return_documents"] = "yes";
  EXPECT_EQ(ParseError(body).param, "return_documents");
  body = Body({"a"});
  body["model"] = 3;
  EXPECT_EQ(ParseError(body).param, "model");
  body = Body({"a"});
  body["user"] = 3;
  EXPECT_EQ(ParseError(body).param, "user");
  body = Body({"a"});
  body["rank_fields"] = {"text"};
  EXPECT_EQ(ParseError(body).param, "rank_fields");
  EXPECT_EQ(ParseError(json::array()).status, 400);
}

v1::RerankResponse Scored(const std::vector<float>& scores) {
  v1::RerankResponse response;
  uint32_t tokens = 3;
  for (const float score : scores) {
    v1::RerankResult& result = *response.add_results();
    result.set_score(score);
    result.set_prompt_tokens(tokens++);
  }
  return response;
}

TEST(GatewayRerank, ResultsMostRelevantFirstTiesInDocumentOrder) {
  RerankCall call = ParseOk(Body({"a", "b", "c", "d"}));
  call.request.set_request_id("rerank-0123");
  const json answer =
      json::parse(RerankJson(call, "bge", Scored({0.5f, 2.0f, 0.5f, -1.0f})).dump());
  EXPECT_EQ(answer["id"], "rerank-0123");
  EXPECT_EQ(answer["object"], "list");
  EXPECT_EQ(answer["model"], "bge");
  EXPECT_EQ(answer["usage"], json({{"prompt_tokens", 3 + 4 + 5 + 6}, {"total_tokens", 18}}));
  const json& results = answer["results"];
  ASSERT_EQ(results.size(), 4u);
  std::vector<int> order;
  for (const json& result : results) order.push_back(result["index"].get<int>());
  EXPECT_EQ(order, (std::vector<int>{1, 0, 2, 3}));
  EXPECT_EQ(results[0],
            json({{"index", 1}, {"relevance_score", 2.0}, {"document", {{"text", "b"}}}}));
  EXPECT_EQ(results[3]["relevance_score"], -1.0);
  // The float32 score, as JSON prints its double: it parses back to the same float.
  const json fraction = RerankJson(call, "bge", Scored({0.1f, 0, 0, 0}));
  EXPECT_EQ(static_cast<float>(fraction["results"][0]["relevance_score"].get<double>()), 0.1f);
}

TEST(GatewayRerank, TopNAndReturnDocuments) {
  RerankCall call = ParseOk(Body({"a", "b", "c"}));
  call.top_n = 2;
  call.return_documents = false;
  const json answer = RerankJson(call, "m", Scored({1.0f, 3.0f, 2.0f}));
  ASSERT_EQ(answer["results"].size(), 2u);
  EXPECT_EQ(answer["results"][0], json({{"index", 1}, {"relevance_score", 3.0}}));
  EXPECT_EQ(answer["results"][1]["index"], 2);
  // Usage counts every document the server scored, not just those returned.
  EXPECT_EQ(answer["usage"]["prompt_tokens"], 3 + 4 + 5);
  call.top_n = 5;
  EXPECT_EQ(RerankJson(call, "m", Scored({1.0f, 3.0f, 2.0f}))["results"].size(), 3u);
}

TEST(GatewayRerank, NanRanksLast) {
  const RerankCall call = ParseOk(Body({"a", "b", "c"}));
  const json answer = RerankJson(call, "m", Scored({std::nanf(""), -5.0f, 1.0f}));
  EXPECT_EQ(answer["results"][0]["index"], 2);
  EXPECT_EQ(answer["results"][1]["index"], 1);
  EXPECT_EQ(answer["results"][2]["index"], 0);
}

TEST(GatewayRerank, AServerThatRanksNothingIsA400WithItsMessage) {
  const std::string why = "this server's model does not rank: serve a reranker";
  const HttpError refused =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.message, why);
  EXPECT_EQ(refused.param, "");
}

}  // namespace
}  // namespace tokenmill::gateway
