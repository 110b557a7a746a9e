#include "gateway/api/responses/responses_handler.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gateway/api/generation.h"
#include "gateway/api/json_fields.h"
#include "gateway/api/openai/request_mapping.h"
#include "gateway/api/openai/response_format.h"
#include "gateway/api/openai/structured_output.h"
#include "gateway/api/openai/tool_calls.h"
#include "gateway/api/responses/responses_api.h"
#include "gateway/api/turn_blocks.h"
#include "gateway/backends/backend_request.h"
#include "gateway/gateway_context.h"
#include "gateway/http/request_body.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// The body mapped to its request, the conversation it continues looked up, its chat built.
std::optional<HttpError> MapResponsesBody(const HttpRequest& request, GatewayContext& context,
                                          const Tenant& tenant, ResponsesRequest& parsed,
                                          std::vector<v1::ChatMessage>& previous) {
  {
    json body;
    GW_RETURN_IF_ERROR(ParseRequestBody(request.body(), body));
    GW_RETURN_IF_ERROR(ParseResponsesRequest(body, parsed));
  }
  KeepSchemaOrder(request.body(), {"text", "format", "schema"},
                  *parsed.generate.mutable_sampling());
  if (!parsed.previous_response_id.empty()) {
    std::optional<std::vector<v1::ChatMessage>> stored = context.responses.Get(
        parsed.previous_response_id, tenant.name, ResponseStore::Clock::now());
    if (!stored) {
      return PreviousResponseNotFound(
          parsed.previous_response_id,
          static_cast<int>(context.responses.limits().ttl.count()));
    }
    previous = std::move(*stored);
  }
  KeepResponsesToolsOrder(request.body(), parsed.tools);
  BuildResponsesChat(parsed, previous, *parsed.generate.mutable_chat());
  if (parsed.affinity_key.empty()) parsed.affinity_key = ChatAffinityKey(parsed.generate.chat());
  return TooLargeForBackend(parsed.generate, BytesAddedOnRouting(parsed.model));
}

// The events of one streamed response, numbered by sequence_number: response.created and
// response.in_progress; per block its output item (output_item.added, for reasoning and
// messages content_part.added, the deltas, their .done, content_part.done, output_item.done);
// then response.completed (or response.incomplete, response.failed). Each returns false
// when the client is gone.
class ResponseStream {
 public:
  ResponseStream(HttpExchange& exchange, const HttpRequest& request,
                 const ResponsesRequest& parsed, ResponseState& state, const TurnBlocks& turn)
      : exchange_(exchange), request_(request), parsed_(parsed), state_(state), turn_(turn) {}

  bool started() const { return started_; }

  asio::awaitable<bool> Start() {
    started_ = true;
    if (!co_await exchange_.StartEventStream(request_)) co_return false;
    const json response = ResponseJson(parsed_, state_);
    std::string chunk = Event({{"type", "response.created"}, {"response", response}});
    chunk += Event({{"type", "response.in_progress"}, {"response", response}});
    co_return co_await exchange_.WriteEventChunk(chunk);
  }

  // `cut`: the output ended at max_output_tokens (the block stopped last is incomplete).
  asio::awaitable<bool> Blocks(const std::vector<TurnBlocks::Event>& events, bool cut) {
    std::string chunk;
    for (const TurnBlocks::Event& event : events) chunk += EventText(event, cut);
    if (chunk.empty()) co_return true;
    co_return co_await exchange_.WriteEventChunk(chunk);
  }

  // The output items of every block, as output_item.done gave them.
  const std::vector<json>& items() const { return items_; }

  // state_ holds the finished response.
  asio::awaitable<bool> Finish() {
    const json event = {{"type", state_.status == "completed" ? "response.completed"
                                                              : "response.incomplete"},
                        {"response", ResponseJson(parsed_, state_)}};
    if (!co_await exchange_.WriteEventChunk(Event(event))) co_return false;
    co_return co_await exchange_.EndEventStream();
  }

  // state_ holds the failed response.
  asio::awaitable<void> Fail() {
    // (Built before the co_await: GCC 12 miscompiles temporaries inside one.)
    const std::string event =
        Event({{"type", "response.failed"}, {"response", ResponseJson(parsed_, state_)}});
    if (co_await exchange_.WriteEventChunk(event)) co_await exchange_.EndEventStream();
  }

 private:
  std::string Event(json event) {
    event["sequence_number"] = next_sequence_number_++;
    return SseNamedEvent(event);
  }

  std::string EventText(const TurnBlocks::Event& event, bool cut) {
    const TurnBlock& block = turn_.blocks().at(event.block);
    const size_t index = event.block;
    const bool call = block.kind == TurnBlock::Kind::kToolCall;
    std::string chunk;
    switch (event.type) {
      case TurnBlocks::Event::Type::kStart: {
        ids_.push_back(exchange_.context().NewId(ItemIdPrefix(block)));
        chunk += Event({{"type", "response.output_item.added"},
                        {"output_index", index},
                        {"item", OutputItemJson(block, ids_[index], "in_progress", true)}});
        if (!call) {
          chunk += Event({{"type", "response.content_part.added"},
                          {"item_id", ids_[index]},
                          {"output_index", index},
                          {"content_index", 0},
                          {"part", ContentPartJson(block.kind, "")}});
        }
        break;
      }
      case TurnBlocks::Event::Type::kDelta: {
        json delta = {{"type", DeltaType(block.kind, false)},
                      {"item_id", ids_[index]},
                      {"output_index", index},
                      {"delta", event.delta}};
        if (!call) delta["content_index"] = 0;
        if (block.kind == TurnBlock::Kind::kText) delta["logprobs"] = json::array();
        chunk += Event(std::move(delta));
        break;
      }
      case TurnBlocks::Event::Type::kStop: {
        json done = {{"type", DeltaType(block.kind, true)},
                     {"item_id", ids_[index]},
                     {"output_index", index}};
        if (call) {
          done["name"] = block.call_name;
          done["arguments"] = block.text;
        } else {
          done["content_index"] = 0;
          done["text"] = block.text;
        }
        if (block.kind == TurnBlock::Kind::kText) done["logprobs"] = json::array();
        chunk += Event(std::move(done));
        if (!call) {
          chunk += Event({{"type", "response.content_part.done"},
                          {"item_id", ids_[index]},
                          {"output_index", index},
                          {"content_index", 0},
                          {"part", ContentPartJson(block.kind, block.text)}});
        }
        const bool last = index + 1 == turn_.blocks().size();
        items_.push_back(
            OutputItemJson(block, ids_[index], cut && last ? "incomplete" : "completed", false));
        chunk += Event(
            {{"type", "response.output_item.done"}, {"output_index", index}, {"item", items_.back()}});
        break;
      }
    }
    return chunk;
  }

  static const char* DeltaType(TurnBlock::Kind kind, bool done) {
    switch (kind) {
      case TurnBlock::Kind::kReasoning:
        return done ? "response.reasoning_text.done" : "response.reasoning_text.delta";
      case TurnBlock::Kind::kText:
        return done ? "response.output_text.done" : "response.output_text.delta";
      case TurnBlock::Kind::kToolCall:
        return done ? "response.function_call_arguments.done"
                    : "response.function_call_arguments.delta";
    }
    return "";
  }

  HttpExchange& exchange_;
  const HttpRequest& request_;
  const ResponsesRequest& parsed_;
  ResponseState& state_;
  const TurnBlocks& turn_;
  std::vector<std::string> ids_;  // of each block's item
  std::vector<json> items_;
  bool started_ = false;
  int64_t next_sequence_number_ = 0;
};

}  // namespace

asio::awaitable<void> HandleResponses(HttpExchange& exchange, const HttpRequest& request) {
  GatewayContext& context = exchange.context();
  ResponsesRequest parsed;
  std::vector<v1::ChatMessage> conversation;  // continued, then this input and output
  if (std::optional<HttpError> error =
          MapResponsesBody(request, context, exchange.tenant(), parsed, conversation)) {
    co_await exchange.WriteError(request, *error);
    co_return;
  }
  for (const IgnoredField& field : parsed.ignored_fields) {
    context.ignored_fields.Note("responses", field);
  }
  ResponseState state;
  state.id = context.NewId("resp");
  state.created_at = UnixSeconds();

  Generation::Params params;
  params.generates.push_back(parsed.generate);
  params.model = parsed.model;
  params.affinity_key = parsed.affinity_key;
  params.request_id = state.id;
  params.structured_output_param = parsed.structured_output_param;
  const std::unique_ptr<Generation> owner =
      co_await Generation::Start(exchange, request, std::move(params));
  if (!owner) co_return;
  Generation& generation = *owner;
  state.model = generation.model();

  TurnBlocks turn;
  AssistantTurn message;  // as the next turn's chat carries it
  ResponseStream events(exchange, request, parsed, state, turn);
  bool cut = false;
  while (std::optional<Generation::Output> output = co_await generation.Next()) {
    const v1::GenerateResponse* response = &output->response;
    std::vector<TurnBlocks::Event> blocks = turn.Add(*response);
    message.Add(*response);
    if (response->finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      cut = response->finish_reason() == v1::FINISH_REASON_LENGTH;
      const v1::Usage& usage = response->usage();
      state.usage = ResponseUsage{usage.prompt_tokens(), usage.cached_prompt_tokens(),
                                  usage.completion_tokens()};
      for (TurnBlocks::Event& event : turn.Finish()) blocks.push_back(std::move(event));
    }
    if (!parsed.stream) continue;
    bool written = true;
    if (!events.started()) written = co_await events.Start();
    if (written) written = co_await events.Blocks(blocks, cut);
    if (!written) generation.ClientGone();
  }
  if (generation.client_gone()) co_return;

  if (const std::optional<HttpError>& failure = generation.failure()) {
    if (!events.started()) {
      co_await exchange.WriteError(request, *failure);
    } else {
      state.status = "failed";
      state.error = failure;
      state.output = events.items();
      co_await events.Fail();
    }
    co_return;
  }
  state.status = cut ? "incomplete" : "completed";
  if (cut) state.incomplete_reason = "max_output_tokens";
  if (parsed.stream) {
    state.output = events.items();
  } else {
    const std::vector<TurnBlock>& blocks = turn.blocks();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const bool last = i + 1 == blocks.size();
      const std::string item_id = context.NewId(ItemIdPrefix(blocks[i]));
      state.output.push_back(OutputItemJson(blocks[i], item_id,
                                            cut && last ? "incomplete" : "completed", false));
    }
  }
  if (parsed.store) {
    for (v1::ChatMessage& input : parsed.input) conversation.push_back(std::move(input));
    v1::ChatMessage& answer = conversation.emplace_back();
    answer.set_role("assistant");
    // "" even for a turn of calls alone: templates that add content to a string (SmolLM2's)
    // fail on null, and those that test it treat "" as none.
    answer.set_content(message.content);
    answer.set_reasoning(message.reasoning);
    for (v1::ToolCall& call : message.tool_calls) *answer.add_tool_calls() = std::move(call);
    const json input_items = InputItemsJson(
        parsed.raw_input, [&](std::string_view prefix) { return context.NewId(prefix); });
    context.responses.Put(state.id, exchange.tenant().name, std::move(conversation),
                          ResponseJson(parsed, state).dump(), input_items.dump(),
                          ResponseStore::Clock::now());
  }
  if (!parsed.stream) {
    co_await exchange.WriteJson(request, 200, ResponseJson(parsed, state));
    co_return;
  }
  // No response came before the end (cannot happen with a sane server): still every event.
  bool written = true;
  if (!events.started()) written = co_await events.Start();
  if (written) co_await events.Finish();
}

namespace {

HttpError StoredResponseNotFound(const std::string& id, const ResponseStore& store) {
  return NotFound(
      "Response with id '" + id + "' not found: it was not stored (store: false), is over " +
      std::to_string(store.limits().ttl.count()) +
      " s old, was dropped for room or deleted; the gateway keeps stored responses in memory only");
}

}  // namespace

asio::awaitable<void> HandleStoredResponse(HttpExchange& exchange, const HttpRequest& request,
                                           const std::string& id) {
  ResponseStore& store = exchange.context().responses;
  const ResponseStore::Clock::time_point now = ResponseStore::Clock::now();
  if (request.method() == boost::beast::http::verb::delete_) {
    if (!store.Erase(id, exchange.tenant().name, now)) {
      co_await exchange.WriteError(request, StoredResponseNotFound(id, store));
      co_return;
    }
    const json deleted = {{"id", id}, {"object", "response.deleted"}, {"deleted", true}};
    co_await exchange.WriteJson(request, 200, deleted);
    co_return;
  }
  std::optional<std::string> response = store.GetResponse(id, exchange.tenant().name, now);
  if (!response) {
    co_await exchange.WriteError(request, StoredResponseNotFound(id, store));
    co_return;
  }
  co_await exchange.WriteText(request, 200, std::move(*response), "application/json");
}

asio::awaitable<void> HandleInputItems(HttpExchange& exchange, const HttpRequest& request,
                                       const std::string& id) {
  const std::string_view target(request.target().data(), request.target().size());
  const size_t question = target.find('?');
  InputItemsQuery query;
  if (question != std::string_view::npos) {
    if (std::optional<HttpError> error = ParseInputItemsQuery(target.substr(question + 1), query)) {
      co_await exchange.WriteError(request, *error);
      co_return;
    }
  }
  const ResponseStore& store = exchange.context().responses;
  std::optional<std::string> items =
      store.GetInputItems(id, exchange.tenant().name, ResponseStore::Clock::now());
  if (!items) {
    co_await exchange.WriteError(request, StoredResponseNotFound(id, store));
    co_return;
  }
  co_await exchange.WriteJson(request, 200, InputItemsPage(json::parse(*items), query));
}

}  // namespace tokenmill::gateway
