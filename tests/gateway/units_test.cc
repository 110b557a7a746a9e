// Gateway pieces without a network: routing by affinity, response and SSE framing, error
// mapping, API key comparison, flags, the event queue's backpressure.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <map>
#include <string>

#include "gateway/api/openai/response_format.h"
#include "gateway/backends/affinity.h"
#include "gateway/backends/upstream_call.h"
#include "gateway/gateway_options.h"
#include "gateway/http/http_error.h"
#include "gateway/http_gateway.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

std::vector<BackendCandidate> Candidates(const std::vector<std::string>& addresses) {
  std::vector<BackendCandidate> out;
  for (const std::string& a : addresses) {
    BackendCandidate c;
    c.address = a;
    c.eligible = true;
    out.push_back(c);
  }
  return out;
}

TEST(GatewayAffinity, SameKeySameBackendAndKeysSpread) {
  const std::vector<std::string> addresses = {"10.0.0.1:50051", "10.0.0.2:50051",
                                              "10.0.0.3:50051"};
  const std::vector<BackendCandidate> candidates = Candidates(addresses);
  std::map<int, int> per_backend;
  for (int i = 0; i < 300; ++i) {
    std::string key = "system prompt ";
    key += std::to_string(i);
    const int chosen = ChooseBackend(candidates, key, 16);
    EXPECT_EQ(ChooseBackend(candidates, key, 16), chosen);
    ++per_backend[chosen];
  }
  ASSERT_EQ(per_backend.size(), 3u);
  for (const auto& entry : per_backend) EXPECT_GT(entry.second, 60);  // about 100 each
}

TEST(GatewayAffinity, LosingABackendMovesOnlyItsKeys) {
  const std::vector<std::string> addresses = {"a:1", "b:1", "c:1"};
  std::vector<BackendCandidate> all = Candidates(addresses);
  std::vector<BackendCandidate> without_b = all;
  without_b[1].eligible = false;
  for (int i = 0; i < 200; ++i) {
    std::string key = "k";
    key += std::to_string(i);
    const int before = ChooseBackend(all, key, 16);
    const int after = ChooseBackend(without_b, key, 16);
    if (before != 1) {
      EXPECT_EQ(after, before) << key;
    }
    EXPECT_NE(after, 1);
  }
}

TEST(GatewayAffinity, FallsBackToTheLeastLoaded) {
  // Named: candidates view their addresses (a temporary list dangled, ASan and TSan said).
  const std::vector<std::string> addresses = {"a:1", "b:1", "c:1"};
  std::vector<BackendCandidate> c = Candidates(addresses);
  const int chosen = ChooseBackend(c, "key", 4);
  c[chosen].in_flight = 10;
  for (int i = 0; i < 3; ++i) {
    if (i != chosen) c[i].in_flight = 7;
  }
  EXPECT_EQ(ChooseBackend(c, "key", 4), chosen);  // 3 more than the least: still affine
  const int least = (chosen + 1) % 3;
  c[least].in_flight = 2;
  EXPECT_EQ(ChooseBackend(c, "key", 4), least);  // 8 more: the least-loaded one
  c[least].in_flight = 7;
  c[chosen].eligible = false;
  const int fallback = ChooseBackend(c, "key", 4);
  EXPECT_NE(fallback, chosen);
  EXPECT_EQ(ChooseBackend(c, "", 4), fallback);  // no key: least-loaded, first of equals
  for (BackendCandidate& candidate : c) candidate.eligible = false;
  EXPECT_EQ(ChooseBackend(c, "key", 4), -1);
}

TEST(GatewayResponseFormat, SseFramingAndChunks) {
  ResponseHeader header;
  header.endpoint = Endpoint::kChatCompletions;
  header.id = "chatcmpl-1";
  header.created = 7;
  header.model = "m";
  const json first = ChunkJson(header, 1, "Hel", std::nullopt, std::nullopt, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["index"], 1);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = ChunkJson(header, 1, "", std::nullopt, v1::FINISH_REASON_LENGTH, false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["delta"], json::object());

  const std::string event = SseEvent(json{{"a", "x\ny"}});
  EXPECT_EQ(event, "data: {\"a\":\"x\\ny\"}\n\n");  // one line: newlines stay escaped
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  // Half a UTF-8 character (a token boundary) does not throw.
  EXPECT_EQ(DumpJson(json{{"t", std::string("\xE2\x82")}}), "{\"t\":\"\xEF\xBF\xBD\"}");
}

TEST(GatewayResponseFormat, UsageAndWholeCompletions) {
  const json usage = UsageJson(10, 5, 8);
  EXPECT_EQ(usage["total_tokens"], 15);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 8);
  ResponseHeader header;
  header.endpoint = Endpoint::kCompletions;
  ChoiceResult a;
  a.text = "one";
  a.finish_reason = v1::FINISH_REASON_STOP;
  a.stop_string = "END";
  ChoiceResult b;
  b.text = "two";
  b.finish_reason = v1::FINISH_REASON_LENGTH;
  const json body = CompletionJson(header, {a, b}, false, usage);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["text"], "two");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][0]["stop_reason"], "END");
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
}

TEST(GatewayResponseFormat, LogprobsInBothShapes) {
  TokenLogprobText t1;
  t1.token = "He";
  t1.logprob = -0.5f;
  t1.top = {{"He", -0.5f}, {"She", -1.5f}};
  TokenLogprobText t2;
  t2.token = "llo";
  t2.logprob = -0.1f;
  const json completion = LogprobsJson(Endpoint::kCompletions, {t1, t2}, 4);
  EXPECT_EQ(completion["tokens"], json({"He", "llo"}));
  EXPECT_EQ(completion["text_offset"], json({4, 6}));
  EXPECT_FLOAT_EQ(completion["top_logprobs"][0]["She"].get<float>(), -1.5f);
  const json chat = LogprobsJson(Endpoint::kChatCompletions, {t1}, 0);
  EXPECT_EQ(chat["content"][0]["bytes"], json({72, 101}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "She");
}

TEST(GatewayErrors, GrpcStatusesBecomeOpenAIStatuses) {
  const HttpError bad = FromGrpcStatus(grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT, "sampling.temperature = 0.7 is not supported yet"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.param, "temperature");
  const HttpError full =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue is full"));
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(full.retry_after_seconds, 1);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining")).status, 503);
  EXPECT_EQ(ParamNamedBy("stop[1] is empty: remove it"), "stop");
  EXPECT_EQ(ParamNamedBy("n = 3 is not supported yet"), "n");
  EXPECT_EQ(ParamNamedBy("token_ids.ids[1] = 49152 is outside"), "prompt");
  EXPECT_EQ(ParamNamedBy("chat.tools_json must be a JSON array"), "tools");
  EXPECT_EQ(ParamNamedBy("the prompt is 9000 tokens"), "");
  EXPECT_EQ(ParamNamedBy("documents[3] is 900 tokens with the query"), "documents");
  EXPECT_EQ(ParamNamedBy("query is empty"), "query");
  // Beam search's fields as the client spells them (use_beam_search, length_penalty).
  EXPECT_EQ(ParamNamedBy("beam_search: n = 17 must be in [1, 16]"), "use_beam_search");
  EXPECT_EQ(ParamNamedBy("beam_search.length_penalty must be a finite number"), "length_penalty");
  const json shape = BadRequest("m", "p").ToJson();
  EXPECT_EQ(shape["error"]["param"], "p");
  EXPECT_TRUE(shape["error"]["code"].is_null());
  EXPECT_EQ(shape["error"]["type"], "invalid_request_error");
}

TEST(GatewayOptionsTest, EnvironmentVariablesAndChecks) {
  EXPECT_EQ(GatewayEnvName("--max-body-size"), "TOKENMILL_GATEWAY_MAX_BODY_SIZE");
  EXPECT_EQ(GatewayEnvName("--port"), "TOKENMILL_GATEWAY_PORT");
  GatewayOptions options;
  CLI::App app;
  AddGatewayOptions(app, options);
  app.parse("--backend a:1 --backend b:2 --max-body-size 2KiB", false);
  EXPECT_EQ(options.backends, (std::vector<std::string>{"a:1", "b:2"}));
  StatusOr<GatewayLimits> limits = ResolveGatewayLimits(options);
  ASSERT_TRUE(limits.ok());
  EXPECT_EQ(limits->max_body_bytes, 2048);
  options.backends.push_back("nohost");
  EXPECT_FALSE(ResolveGatewayLimits(options).ok());
}

UpstreamEvent ResponseEvent() { return UpstreamEvent{}; }

TEST(GatewayEventQueue, PausesReadsAtItsBoundAndResumesThemAtHalf) {
  namespace asio = boost::asio;
  asio::io_context io;
  GatewayMetrics metrics;
  auto queue = std::make_shared<EventQueue>(asio::make_strand(io), metrics, /*max_buffered=*/4);
  int resumed = 0;
  const auto resume = [&resumed] { ++resumed; };
  for (int i = 0; i < 3; ++i) {
    queue->Push(ResponseEvent());
    EXPECT_FALSE(queue->PauseIfFull(resume)) << "response " << i;
  }
  queue->Push(ResponseEvent());
  EXPECT_TRUE(queue->PauseIfFull(resume));  // 4 waiting: the caller stops reading
  UpstreamEvent done;
  done.kind = UpstreamEvent::Kind::kDone;  // ends of calls do not count
  queue->Push(done);
  std::vector<int> resumed_after;  // after each Next
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 5; ++i) {
          const UpstreamEvent event = co_await queue->Next();
          EXPECT_EQ(event.kind == UpstreamEvent::Kind::kDone, i == 4);
          resumed_after.push_back(resumed);
        }
      },
      asio::detached);
  io.run();
  // Still paused at 3 waiting; resumed once at 2 (half), not again.
  EXPECT_EQ(resumed_after, (std::vector<int>{0, 1, 1, 1, 1}));
  BackendPool pool({}, BackendSecurity{}, std::chrono::milliseconds(1000), 0, {});
  const std::string text = metrics.Render(pool);
  EXPECT_NE(text.find("tokenmill_gateway:buffered_responses 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tokenmill_gateway:max_request_buffered_responses 4\n"), std::string::npos);
  EXPECT_NE(text.find("tokenmill_gateway:upstream_read_pauses_total 1\n"), std::string::npos);
}

}  // namespace
}  // namespace tokenmill::gateway
