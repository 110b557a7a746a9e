#include "gateway/api/anthropic/anthropic_handler.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/json_nesting.h"
#include "gateway/api/anthropic/anthropic_messages.h"
#include "gateway/api/generation.h"
#include "gateway/api/openai/response_format.h"
#include "gateway/api/openai/structured_output.h"
#include "gateway/api/turn_blocks.h"
#include "gateway/backends/backend_request.h"
#include "gateway/backends/unary_call.h"
#include "gateway/gateway_context.h"
#include "gateway/http/request_body.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

json BlockJson(const TurnBlock& block, bool started) {
  switch (block.kind) {
    case TurnBlock::Kind::kReasoning:
      return {{"type", "thinking"}, {"thinking", started ? "" : block.text}, {"signature", ""}};
    case TurnBlock::Kind::kText:
      return {{"type", "text"}, {"text", started ? "" : block.text}};
    case TurnBlock::Kind::kToolCall: {
      json input = json::object();
      if (!started) {
        // The server sends a call's arguments as a parsed JSON object; a model's deeper one
        // stays unparsed (copying and printing it would recurse once per level).
        json parsed = JsonTextNestsDeeperThan(block.text)
                          ? json()
                          : json::parse(block.text, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) input = std::move(parsed);
      }
      return {{"type", "tool_use"}, {"id", ToolUseId(block.call_id)}, {"name", block.call_name},
              {"input", input}};
    }
  }
  return nullptr;
}

json DeltaJson(TurnBlock::Kind kind, const std::string& text) {
  switch (kind) {
    case TurnBlock::Kind::kReasoning:
      return {{"type", "thinking_delta"}, {"thinking", text}};
    case TurnBlock::Kind::kText:
      return {{"type", "text_delta"}, {"text", text}};
    case TurnBlock::Kind::kToolCall:
      return {{"type", "input_json_delta"}, {"partial_json", text}};
  }
  return nullptr;
}

// A turn's blocks as message content; one empty text block when it has none.
json ContentJson(const TurnBlocks& turn) {
  json content = json::array();
  for (const TurnBlock& block : turn.blocks()) content.push_back(BlockJson(block, false));
  if (content.empty()) content.push_back({{"type", "text"}, {"text", ""}});
  return content;
}

// The events of one streamed message, in Anthropic's order: message_start, ping, then per
// block content_block_start, content_block_delta..., content_block_stop, then message_delta
// and message_stop. Each returns false when the client is gone.
class MessageStream {
 public:
  MessageStream(HttpExchange& exchange, const HttpRequest& request, const std::string& id,
                const std::string& model, const TurnBlocks& turn)
      : exchange_(exchange), request_(request), id_(id), model_(model), turn_(turn) {}

  bool started() const { return started_; }

  // `usage`: the prompt's counts, as the first response brought them.
  asio::awaitable<bool> Start(const TokenUsage& usage) {
    started_ = true;
    if (!co_await exchange_.StartEventStream(request_)) co_return false;
    const json start = {
        {"type", "message_start"},
        {"message", MessageJson(id_, model_, json::array(), std::nullopt, usage)}};
    const json ping = {{"type", "ping"}};
    co_return co_await exchange_.WriteEventChunk(SseNamedEvent(start) + SseNamedEvent(ping));
  }

  asio::awaitable<bool> Blocks(const std::vector<TurnBlocks::Event>& events) {
    std::string chunk;
    for (const TurnBlocks::Event& event : events) chunk += EventText(event);
    if (chunk.empty()) co_return true;
    co_return co_await exchange_.WriteEventChunk(chunk);
  }

  asio::awaitable<bool> Finish(const StopReason& stop, const TokenUsage& usage) {
    std::string chunk;
    if (!any_block_) {
      const json empty = {{"type", "content_block_start"},
                          {"index", 0},
                          {"content_block", {{"type", "text"}, {"text", ""}}}};
      const json stop_empty = {{"type", "content_block_stop"}, {"index", 0}};
      chunk += SseNamedEvent(empty) + SseNamedEvent(stop_empty);
    }
    json delta = {{"stop_reason", stop.reason}, {"stop_sequence", nullptr}};
    if (stop.stop_sequence) delta["stop_sequence"] = *stop.stop_sequence;
    const json message_delta = {
        {"type", "message_delta"}, {"delta", delta}, {"usage", AnthropicUsage(usage)}};
    const json message_stop = {{"type", "message_stop"}};
    chunk += SseNamedEvent(message_delta) + SseNamedEvent(message_stop);
    if (!co_await exchange_.WriteEventChunk(chunk)) co_return false;
    co_return co_await exchange_.EndEventStream();
  }

  // A failure after the stream began: Anthropic's error event ends it.
  asio::awaitable<void> Fail(const HttpError& error) {
    // Built before the co_await: GCC 12 miscompiles a temporary inside a co_await expression
    // (this one crashed the gateway when a stream failed after its first event).
    const std::string event = SseNamedEvent(ToAnthropicError(error).body);
    if (co_await exchange_.WriteEventChunk(event)) co_await exchange_.EndEventStream();
  }

 private:
  std::string EventText(const TurnBlocks::Event& event) {
    const TurnBlock& block = turn_.blocks().at(event.block);
    json data;
    switch (event.type) {
      case TurnBlocks::Event::Type::kStart:
        any_block_ = true;
        data = {{"type", "content_block_start"},
                {"index", event.block},
                {"content_block", BlockJson(block, true)}};
        break;
      case TurnBlocks::Event::Type::kDelta:
        data = {{"type", "content_block_delta"},
                {"index", event.block},
                {"delta", DeltaJson(block.kind, event.delta)}};
        break;
      case TurnBlocks::Event::Type::kStop:
        data = {{"type", "content_block_stop"}, {"index", event.block}};
        break;
    }
    return SseNamedEvent(data);
  }

  HttpExchange& exchange_;
  const HttpRequest& request_;
  const std::string& id_;
  const std::string& model_;
  const TurnBlocks& turn_;
  bool started_ = false;
  bool any_block_ = false;
};

}  // namespace

asio::awaitable<void> HandleMessages(HttpExchange& exchange, const HttpRequest& request) {
  MessagesRequest parsed;
  {
    json body;
    std::optional<HttpError> error = ParseRequestBody(request.body(), body);
    if (!error) error = ParseMessagesRequest(body, parsed);
    if (!error) {
      KeepSchemaOrder(request.body(), {"output_config", "format", "schema"},
                      *parsed.generate.mutable_sampling());
      KeepAnthropicToolsOrder(request.body(), *parsed.generate.mutable_chat());
      error = TooLargeForBackend(parsed.generate, BytesAddedOnRouting(parsed.model));
    }
    if (error) {
      co_await exchange.WriteError(request, *error);
      co_return;
    }
  }
  const std::string id = exchange.context().NewId("msg");
  const bool stream = parsed.stream;
  Generation::Params params;
  params.generates.push_back(std::move(parsed.generate));
  params.model = parsed.model;
  params.affinity_key = parsed.affinity_key;
  params.request_id = id;
  params.structured_output_param = parsed.structured_output_param;
  const std::unique_ptr<Generation> owner =
      co_await Generation::Start(exchange, request, std::move(params));
  if (!owner) co_return;
  Generation& generation = *owner;

  TurnBlocks turn;
  MessageStream events(exchange, request, id, generation.model(), turn);
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  std::string stop_string;
  TokenUsage usage;
  while (std::optional<Generation::Output> output = co_await generation.Next()) {
    const v1::GenerateResponse* response = &output->response;
    std::vector<TurnBlocks::Event> blocks = turn.Add(*response);
    if (response->finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      finish = response->finish_reason();
      stop_string = response->stop_string();
      usage = {response->usage().prompt_tokens(), response->usage().cached_prompt_tokens(),
               response->usage().completion_tokens()};
      for (TurnBlocks::Event& event : turn.Finish()) blocks.push_back(std::move(event));
    }
    if (!stream) continue;
    bool written = true;
    if (!events.started()) {
      const TokenUsage prompt{response->usage().prompt_tokens(),
                              response->usage().cached_prompt_tokens(),
                              static_cast<uint64_t>(response->token_ids_size())};
      written = co_await events.Start(prompt);
    }
    if (written) written = co_await events.Blocks(blocks);
    if (!written) generation.ClientGone();
  }
  if (generation.client_gone()) co_return;
  const std::optional<HttpError>& failure = generation.failure();

  if (events.started()) {
    if (failure) {
      co_await events.Fail(*failure);
    } else {
      co_await events.Finish(AnthropicStopReason(finish, stop_string), usage);
    }
    co_return;
  }
  if (failure) {
    co_await exchange.WriteError(request, *failure);
    co_return;
  }
  const StopReason stop = AnthropicStopReason(finish, stop_string);
  if (stream) {
    // No response came before the end (cannot happen with a sane server): still the whole
    // sequence of events.
    if (co_await events.Start(usage)) co_await events.Finish(stop, usage);
    co_return;
  }
  co_await exchange.WriteJson(request, 200,
                              MessageJson(id, generation.model(), ContentJson(turn), stop,
                                          usage));
}

asio::awaitable<void> HandleCountTokens(HttpExchange& exchange, const HttpRequest& request) {
  co_await HandleUnaryCall(
      exchange, request,
      UnaryCall<TokenizeCall, v1::TokenizeResponse>{
          .parse = ParseCountTokensRequest,
          .send = AwaitTokenize,
          .answer = [](const UnaryReply<TokenizeCall, v1::TokenizeResponse>& reply) -> json {
            return {{"input_tokens", reply.response.token_ids_size()}};
          },
          .refused_param = ""});
}

}  // namespace tokenmill::gateway
