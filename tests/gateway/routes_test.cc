// The route table: which route a path finds, with its methods, key, error dialect and metrics
// label, and the metrics counting each API under its own label.
#include <gtest/gtest.h>

#include <string>

#include "gateway/backends/backend_pool.h"
#include "gateway/gateway_metrics.h"
#include "gateway/routes.h"

namespace tokenmill::gateway {
namespace {

using boost::beast::http::verb;

std::string LabelOf(std::string_view path) {
  return std::string(MetricsLabel(FindRoute(path).route));
}

TEST(GatewayRoutes, EveryApiHasItsOwnLabel) {
  EXPECT_EQ(LabelOf("/v1/completions"), "/v1/completions");
  EXPECT_EQ(LabelOf("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(LabelOf("/v1/embeddings"), "/v1/embeddings");
  for (const char* rerank : {"/v1/rerank", "/rerank", "/v1/reranking", "/v2/rerank"}) {
    EXPECT_EQ(LabelOf(rerank), rerank);
  }
  EXPECT_EQ(LabelOf("/v1/responses"), "/v1/responses");
  EXPECT_EQ(LabelOf("/v1/messages"), "/v1/messages");
  EXPECT_EQ(LabelOf("/v1/messages/count_tokens"), "/v1/messages/count_tokens");
  EXPECT_EQ(LabelOf("/v1/responses/resp-1"), "/v1/responses/{id}");
  EXPECT_EQ(LabelOf("/v1/responses/resp-1/input_items"), "/v1/responses/{id}/input_items");
  EXPECT_EQ(LabelOf("/v1/models/org/model"), "/v1/models/{model}");
  EXPECT_EQ(LabelOf("/health"), "/health");
  // Unknown paths share one label: the label set stays bounded.
  EXPECT_EQ(LabelOf("/v1/unknown"), "other");
  EXPECT_EQ(LabelOf("/v1/models/"), "other");
  EXPECT_EQ(LabelOf("/v1/responses/a/b"), "other");
  EXPECT_EQ(LabelOf("/v1/responses//input_items"), "other");
}

TEST(GatewayRoutes, ValuesAreDecodedAndModelIdsMaySpanSegments) {
  EXPECT_EQ(FindRoute("/v1/models/org%2Fa/b").value, "org/a/b");
  EXPECT_EQ(FindRoute("/v1/responses/resp%2D1").value, "resp-1");
  EXPECT_EQ(FindRoute("/v1/responses/resp-1/input_items").value, "resp-1");
  EXPECT_EQ(FindRoute("/v1/chat/completions").value, "");
}

TEST(GatewayRoutes, MethodsKeysAndErrorDialects) {
  const Route& stored = *FindRoute("/v1/responses/resp-1").route;
  EXPECT_TRUE(Allows(stored, verb::get));
  EXPECT_TRUE(Allows(stored, verb::delete_));
  EXPECT_FALSE(Allows(stored, verb::post));
  EXPECT_FALSE(Allows(stored, verb::unknown));
  EXPECT_TRUE(Allows(*FindRoute("/v1/chat/completions").route, verb::post));
  EXPECT_FALSE(Allows(*FindRoute("/v1/chat/completions").route, verb::get));
  EXPECT_TRUE(Allows(*FindRoute("/v1/embeddings").route, verb::post));
  EXPECT_FALSE(Allows(*FindRoute("/v1/embeddings").route, verb::get));
  EXPECT_TRUE(FindRoute("/v1/embeddings").route->needs_key);
  EXPECT_EQ(FindRoute("/v1/embeddings").route->errors, ErrorDialect::kOpenAI);
  for (const char* rerank : {"/v1/rerank", "/rerank", "/v1/reranking", "/v2/rerank"}) {
    const Route& route = *FindRoute(rerank).route;
    EXPECT_TRUE(Allows(route, verb::post)) << rerank;
    EXPECT_FALSE(Allows(route, verb::get)) << rerank;
    EXPECT_TRUE(route.needs_key) << rerank;
    EXPECT_EQ(route.errors, ErrorDialect::kOpenAI) << rerank;
  }
  EXPECT_FALSE(FindRoute("/health").route->needs_key);
  EXPECT_FALSE(FindRoute("/metrics").route->needs_key);
  EXPECT_TRUE(FindRoute("/v1/messages").route->needs_key);
  EXPECT_EQ(FindRoute("/v1/messages").route->errors, ErrorDialect::kAnthropic);
  EXPECT_EQ(FindRoute("/v1/messages/count_tokens").route->errors, ErrorDialect::kAnthropic);
  EXPECT_EQ(FindRoute("/v1/responses").route->errors, ErrorDialect::kOpenAI);
  EXPECT_EQ(FindRoute("/v1/chat/completions").route->errors, ErrorDialect::kOpenAI);
}

TEST(GatewayRoutes, ErrorsInTheRoutesDialect) {
  const HttpError busy = NoBackend();
  const ErrorResponse openai = RenderError(ErrorDialect::kOpenAI, busy);
  EXPECT_EQ(openai.status, 503);
  EXPECT_EQ(openai.body, busy.ToJson());
  const ErrorResponse anthropic = RenderError(ErrorDialect::kAnthropic, busy);
  EXPECT_EQ(anthropic.status, 529);  // Anthropic's overloaded_error
  EXPECT_EQ(anthropic.body["type"], "error");
  EXPECT_EQ(anthropic.body["error"]["type"], "overloaded_error");
}

TEST(GatewayRoutes, MetricsCountResponsesAndMessagesUnderTheirOwnRoute) {
  GatewayMetrics metrics;
  for (const char* path :
       {"/v1/responses", "/v1/messages", "/v1/embeddings", "/rerank", "/v1/nothing"}) {
    metrics.RequestStarted();
    metrics.RequestFinished(std::string(MetricsLabel(FindRoute(path).route)), 200, 0.01);
  }
  BackendPool pool({}, BackendSecurity{}, std::chrono::milliseconds(1000), 0, {});
  const std::string text = metrics.Render(pool);
  for (const char* route :
       {"/v1/responses", "/v1/messages", "/v1/embeddings", "/rerank", "other"}) {
    const std::string sample = std::string("tokenmill_gateway:requests_total{route=\"") + route +
                               "\",status=\"200\"} 1\n";
    EXPECT_NE(text.find(sample), std::string::npos) << sample << " in\n" << text;
  }
}

}  // namespace
}  // namespace tokenmill::gateway
