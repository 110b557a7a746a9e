#include "gateway/api/openai/completion_handler.h"

#include <spdlog/spdlog.h>

#include <deque>
#include <numeric>
#include <set>
#include <variant>

#include "gateway/api/generation.h"
#include "gateway/api/openai/prompt_logprobs.h"
#include "gateway/api/openai/response_format.h"
#include "gateway/api/openai/structured_output.h"
#include "gateway/api/openai/tool_calls.h"
#include "gateway/backends/backend_request.h"
#include "gateway/backends/unary_call.h"
#include "gateway/gateway_context.h"
#include "gateway/http/request_body.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

bool HasTools(const CompletionRequest& parsed) {
  return parsed.endpoint == Endpoint::kChatCompletions &&
         !parsed.generates.front().chat().tools_json().empty();
}

// The JSON Schema and tools as the client wrote them: the body parsed again, in order
// (nlohmann::json sorts object keys).
void KeepClientOrder(const HttpRequest& request, CompletionRequest& parsed) {
  nlohmann::ordered_json ordered;
  if (ParseRequestBody(request.body(), ordered)) return;  // parsed once already: cannot fail
  if (HasTools(parsed)) KeepToolsOrder(ordered, *parsed.generates.front().mutable_chat());
  const std::optional<std::string> text =
      OrderedSchemaText(ordered, parsed.structured_output_param);
  if (!text) return;
  for (v1::GenerateRequest& generate : parsed.generates) {
    generate.mutable_sampling()->set_json_schema(*text);
  }
}

// The body of a completions or chat request mapped to its Generate requests. The JSON is
// freed on return: a request holds only its messages while it generates, not its DOM too.
std::optional<HttpError> MapCompletionBody(const HttpRequest& request, Endpoint endpoint,
                                           CompletionRequest& parsed) {
  json body;
  std::optional<HttpError> error = ParseRequestBody(request.body(), body);
  if (!error) error = ParseCompletionRequest(body, endpoint, parsed);
  if (!error && (!parsed.structured_output_param.empty() || HasTools(parsed))) {
    KeepClientOrder(request, parsed);
  }
  for (size_t i = 0; !error && i < parsed.generates.size(); ++i) {
    error = TooLargeForBackend(parsed.generates[i], BytesAddedOnRouting(parsed.model));
  }
  if (!error) {
    if (const auto user = body.find("user"); user != body.end() && user->is_string()) {
      spdlog::debug("request for user {}", user->get<std::string>());
    }
  }
  return error;
}

// Each sampled and top token's text as the server sent it (render_special: a chosen
// <|im_end|> shows as itself).
std::vector<TokenLogprobText> LogprobTexts(const v1::GenerateResponse& response) {
  std::vector<TokenLogprobText> out;
  for (const v1::TokenLogprobs& lp : response.logprobs()) {
    TokenLogprobText entry;
    entry.token = lp.chosen().text();
    entry.logprob = lp.chosen().logprob();
    for (const v1::TokenLogprob& top : lp.top()) entry.top.emplace_back(top.text(), top.logprob());
    out.push_back(std::move(entry));
  }
  return out;
}

// Per-prompt usage, taken from each sequence's final response.
struct PromptUsage {
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
};

// What echo and prompt_logprobs add to one prompt's choices.
struct PromptEcho {
  std::string text;                        // the prompt as the client sent it
  std::vector<v1::TokenLogprobs> entries;  // its tokens' logprobs, from sequence 0
};

// A choice as the client sees it: candidate `index` of its prompt, with echo and
// prompt_logprobs applied (non-streamed responses).
ChoiceResult ShownChoice(const CompletionRequest& parsed, const PromptEcho& prompt,
                         ChoiceResult choice) {
  if (parsed.echo) {
    choice.text.insert(0, prompt.text);
    if (parsed.logprobs) {
      std::vector<TokenLogprobText> logprobs =
          EchoedPromptLogprobs(prompt.entries, parsed.top_logprobs);
      logprobs.insert(logprobs.end(), choice.logprobs.begin(), choice.logprobs.end());
      choice.logprobs = std::move(logprobs);
    }
  }
  if (parsed.prompt_logprobs) {
    choice.prompt_logprobs = PromptLogprobsJson(prompt.entries, *parsed.prompt_logprobs);
  }
  return choice;
}

// The choices of a whole response: each prompt's n (its best ones under best_of).
std::vector<ChoiceResult> ShownChoices(const CompletionRequest& parsed,
                                       const std::vector<PromptEcho>& prompts,
                                       const std::vector<ChoiceResult>& candidates) {
  const size_t per_prompt = candidates.size() / prompts.size();
  std::vector<ChoiceResult> shown;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<ChoiceResult> own(candidates.begin() + p * per_prompt,
                                        candidates.begin() + (p + 1) * per_prompt);
    std::vector<size_t> picked(parsed.n);
    std::iota(picked.begin(), picked.end(), 0);
    if (parsed.best_of > parsed.n) picked = BestCandidates(own, parsed.n);
    for (const size_t i : picked) shown.push_back(ShownChoice(parsed, prompts[p], own[i]));
  }
  return shown;
}

// The first chunk of a streamed choice with echo or prompt_logprobs: the prompt's text and
// entries (all of them: sequence 0's, which the other sequences' chunks wait for).
json EchoChunk(const CompletionRequest& parsed, const ResponseHeader& header, uint32_t index,
               const PromptEcho& prompt) {
  std::optional<json> logprobs;
  if (parsed.logprobs && parsed.echo) {
    logprobs = LogprobsJson(header.endpoint,
                            EchoedPromptLogprobs(prompt.entries, parsed.top_logprobs), 0);
  }
  json chunk = ChunkJson(header, index, parsed.echo ? prompt.text : "", logprobs, std::nullopt,
                         true);
  if (parsed.prompt_logprobs) {
    chunk["choices"][0]["prompt_logprobs"] =
        PromptLogprobsJson(prompt.entries, *parsed.prompt_logprobs);
  }
  return chunk;
}

}  // namespace

asio::awaitable<void> HandleCompletion(HttpExchange& exchange, const HttpRequest& request,
                                       Endpoint endpoint) {
  GatewayContext& context = exchange.context();
  CompletionRequest parsed;
  if (const std::optional<HttpError> error = MapCompletionBody(request, endpoint, parsed)) {
    co_await exchange.WriteError(request, *error);
    co_return;
  }
  const bool chat = endpoint == Endpoint::kChatCompletions;
  for (const IgnoredField& field : parsed.ignored_fields) {
    context.ignored_fields.Note(chat ? "chat completions" : "completions", field);
  }
  ResponseHeader header;
  header.endpoint = endpoint;
  header.id = context.NewId(chat ? "chatcmpl" : "cmpl");
  header.created = UnixSeconds();
  // Sequences per prompt: best_of candidates, or n choices.
  const uint32_t n = std::max(parsed.n, parsed.best_of);
  const size_t prompts = parsed.generates.size();
  std::vector<PromptEcho> echoes(prompts);
  // A prompt of token ids echoes as their text, special tokens as themselves (vLLM's decode).
  std::vector<std::optional<v1::DetokenizeRequest>> detokenize(prompts);
  for (size_t p = 0; p < prompts; ++p) {
    const v1::GenerateRequest& generate = parsed.generates[p];
    echoes[p].text = generate.text();
    if (parsed.echo && generate.has_token_ids()) {
      detokenize[p].emplace();
      *detokenize[p]->mutable_token_ids() = generate.token_ids().ids();
      detokenize[p]->set_render_special(true);
    }
  }
  const bool shows_prompt = parsed.echo || parsed.prompt_logprobs.has_value();
  // Sequence 0 carries the prompt's entries, complete with its first token; streamed, the
  // other sequences' responses wait for them (each choice's first chunk has them all).
  const bool wait_for_entries = parsed.stream && parsed.generates.front().has_prompt_logprobs();
  Generation::Params params;
  params.generates = std::move(parsed.generates);
  params.model = parsed.model;
  params.affinity_key = parsed.affinity_key;
  params.request_id = header.id;
  params.structured_output_param = parsed.structured_output_param;
  const std::unique_ptr<Generation> owner =
      co_await Generation::Start(exchange, request, std::move(params));
  if (!owner) co_return;
  Generation& generation = *owner;
  header.model = generation.model();
  const std::string_view backend_tenant = context.TenantForBackend(exchange.tenant());
  for (size_t p = 0; p < prompts && !generation.failure(); ++p) {
    if (!detokenize[p]) continue;
    detokenize[p]->set_model(generation.called_model());
    v1::DetokenizeResponse detokenized;
    const grpc::Status status = co_await AwaitDetokenize(
        generation.backend(), context.calls, backend_tenant, *detokenize[p], detokenized);
    if (status.ok()) {
      echoes[p].text = detokenized.text();
    } else {
      HttpError error = FromGrpcStatus(status);
      if (error.status == 400) error.param = "prompt";
      generation.Fail(std::move(error));
    }
  }

  std::vector<ChoiceResult> choices(prompts * n);
  std::vector<bool> choice_started(choices.size(), false);
  std::vector<PromptUsage> prompt_usage(prompts);
  uint64_t completion_tokens = 0;
  uint64_t evicted_tokens = 0;
  bool stream_started = false;
  std::vector<bool> entries_complete(prompts, !wait_for_entries);
  std::vector<std::vector<Generation::Output>> waiting(prompts);  // for entries_complete
  std::deque<Generation::Output> released;                        // shown before new ones

  while (true) {
    std::optional<Generation::Output> output;
    if (!released.empty() && !generation.failure() && !generation.client_gone()) {
      output = std::move(released.front());
      released.pop_front();
    } else {
      output = co_await generation.Next();
      if (!output) break;
    }
    const v1::GenerateResponse& response = output->response;
    if (response.index() >= n) continue;  // not ours to show; the server keeps to n
    if (!entries_complete[output->call_index]) {
      if (response.index() != 0) {
        waiting[output->call_index].push_back(std::move(*output));
        continue;
      }
      if (response.token_ids_size() > 0 ||
          response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        entries_complete[output->call_index] = true;
        for (Generation::Output& held : waiting[output->call_index]) {
          released.push_back(std::move(held));
        }
        waiting[output->call_index].clear();
      }
    }
    const size_t choice_index = output->call_index * n + response.index();
    ChoiceResult& choice = choices[choice_index];
    PromptEcho& echo = echoes[output->call_index];
    echo.entries.insert(echo.entries.end(), response.prompt_logprobs().begin(),
                        response.prompt_logprobs().end());
    // A long prompt's entries span several responses, all before or with the first token:
    // a streamed echo waits for that one.
    if (parsed.stream && shows_prompt && response.token_ids_size() == 0 &&
        response.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) {
      continue;
    }
    // echo with max_tokens 0: the one token generated is not the client's.
    const std::string text = parsed.echo_only ? std::string() : response.text();
    std::vector<TokenLogprobText> logprobs;
    if ((parsed.logprobs || parsed.best_of > parsed.n) && !parsed.echo_only &&
        response.logprobs_size() > 0) {
      logprobs = LogprobTexts(response);
    }
    // Streamed echo: the generated text's offsets follow the prompt's.
    const size_t text_offset =
        choice.text.size() + (parsed.stream && parsed.echo ? echo.text.size() : 0);
    choice.text += text;
    choice.reasoning += response.reasoning_text();
    AppendToolCallDeltas(response, choice.tool_calls);
    if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      choice.finish_reason = response.finish_reason();
      choice.stop_string = response.stop_string();
      if (!parsed.echo_only) completion_tokens += response.usage().completion_tokens();
      evicted_tokens += response.usage().evicted_tokens();
      PromptUsage& usage = prompt_usage[output->call_index];
      usage.prompt_tokens = std::max<uint64_t>(usage.prompt_tokens, response.usage().prompt_tokens());
      usage.cached_tokens =
          std::max<uint64_t>(usage.cached_tokens, response.usage().cached_prompt_tokens());
    }
    if (!parsed.stream) {
      for (TokenLogprobText& lp : logprobs) choice.logprobs.push_back(std::move(lp));
      continue;
    }
    const bool has_content = !text.empty() || choice.finish_reason.has_value() ||
                             !logprobs.empty() || !response.reasoning_text().empty() ||
                             !response.tool_calls().empty();
    if (!has_content && choice_started[choice_index]) continue;
    if (!stream_started) {
      stream_started = true;
      if (!co_await exchange.StartEventStream(request)) {
        generation.ClientGone();
        continue;
      }
    }
    if (shows_prompt && !choice_started[choice_index]) {
      const std::string event =
          SseEvent(EchoChunk(parsed, header, static_cast<uint32_t>(choice_index), echo));
      choice_started[choice_index] = true;
      if (!co_await exchange.WriteEventChunk(event)) generation.ClientGone();
    }
    std::optional<json> logprobs_json;
    if (parsed.logprobs) logprobs_json = LogprobsJson(endpoint, logprobs, text_offset);
    json chunk = ChunkJson(header, static_cast<uint32_t>(choice_index), text, logprobs_json,
                           choice.finish_reason, !choice_started[choice_index]);
    if (chat) AddParsedDelta(response, chunk);
    choice_started[choice_index] = true;
    if (!co_await exchange.WriteEventChunk(SseEvent(chunk))) generation.ClientGone();
  }
  if (generation.client_gone()) co_return;
  const std::optional<HttpError>& failure = generation.failure();
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  for (const PromptUsage& usage : prompt_usage) {
    prompt_tokens += usage.prompt_tokens;
    cached_tokens += usage.cached_tokens;
  }
  json usage = UsageJson(prompt_tokens, completion_tokens, cached_tokens);
  // Tokens a kv_window request dropped from its KV cache (tokenmill's extension field).
  if (evicted_tokens > 0) usage["evicted_tokens"] = evicted_tokens;

  if (!parsed.stream || !stream_started) {
    if (failure) {
      co_await exchange.WriteError(request, *failure);
    } else if (!parsed.stream) {
      const json body = CompletionJson(
          header, chat ? choices : ShownChoices(parsed, echoes, choices), parsed.logprobs, usage);
      co_await exchange.WriteJson(request, 200, body);
    } else {
      // Every sequence ended without a response (cannot happen with a sane server): still
      // a well-formed stream.
      if (co_await exchange.StartEventStream(request)) {
        co_await exchange.WriteEventChunk(SseDone());
        co_await exchange.EndEventStream();
      }
    }
    co_return;
  }
  // The stream has begun: a late failure can only be an event.
  // (Each event is built before its co_await: GCC 12 miscompiles temporaries inside one.)
  if (failure) {
    const std::string event = SseEvent(failure->ToJson());
    co_await exchange.WriteEventChunk(event);
  } else if (parsed.include_usage) {
    const std::string event = SseEvent(UsageChunkJson(header, usage));
    co_await exchange.WriteEventChunk(event);
  }
  if (co_await exchange.WriteEventChunk(SseDone())) co_await exchange.EndEventStream();
}

asio::awaitable<void> HandleModels(HttpExchange& exchange, const HttpRequest& request,
                                   std::string model_id) {
  GatewayContext& context = exchange.context();
  if (!context.pool.AnyHealthy()) {
    co_await exchange.WriteError(request, NoBackend());
    co_return;
  }
  json data = json::array();
  std::set<std::string> seen;
  for (const auto& backend : context.pool.backends()) {
    if (!backend->healthy()) continue;
    const std::optional<v1::ModelInfo> info = backend->model_info();
    if (!info) continue;
    // One entry per alias and per LoRA adapter.
    const json entries = ModelEntries(context.pool.ModelNamesOf(*info), *info);
    for (const json& model : entries) {
      const std::string& id = model["id"].get_ref<const std::string&>();
      if (!seen.insert(id).second) continue;
      if (!model_id.empty() && model_id == id) {
        co_await exchange.WriteJson(request, 200, model);
        co_return;
      }
      data.push_back(model);
    }
  }
  if (!model_id.empty()) {
    co_await exchange.WriteError(request, ModelNotFound(model_id));
    co_return;
  }
  // (GCC 12 miscompiles braced JSON literals inside a co_await expression: build them first.)
  const json list = {{"object", "list"}, {"data", data}};
  co_await exchange.WriteJson(request, 200, list);
}

namespace {

json TokenizeAnswer(const UnaryReply<TokenizeCall, v1::TokenizeResponse>& reply) {
  const v1::TokenizeResponse& response = reply.response;
  const std::optional<v1::ModelInfo> info = reply.backend.model_info();
  return {{"tokens", json(std::vector<int32_t>(response.token_ids().begin(),
                                               response.token_ids().end()))},
          {"count", response.token_ids_size()},
          {"max_model_len", response.max_model_len() > 0 ? response.max_model_len()
                            : info                         ? info->max_model_len()
                                                           : 0},
          {"prompt", response.prompt()}};
}

// vLLM's /detokenize answers {"prompt"}, llama-server's {"content"}: both, so that clients of
// either read the text.
json DetokenizeAnswer(const UnaryReply<DetokenizeCall, v1::DetokenizeResponse>& reply) {
  return {{"prompt", reply.response.text()}, {"content", reply.response.text()}};
}

}  // namespace

asio::awaitable<void> HandleTokenize(HttpExchange& exchange, const HttpRequest& request) {
  co_await HandleUnaryCall(exchange, request,
                           UnaryCall<TokenizeCall, v1::TokenizeResponse>{
                               .parse = ParseTokenizeRequest,
                               .send = AwaitTokenize,
                               .answer = TokenizeAnswer,
                               .refused_param = "",
                               .keep_order = [](const nlohmann::ordered_json& body,
                                                TokenizeCall& call) {
                                 if (!call.request.has_chat()) return;
                                 KeepToolsOrder(body, *call.request.mutable_chat());
                               }});
}

asio::awaitable<void> HandleDetokenize(HttpExchange& exchange, const HttpRequest& request) {
  // The server names its own field (token_ids); here the ids came as `tokens`.
  co_await HandleUnaryCall(exchange, request,
                           UnaryCall<DetokenizeCall, v1::DetokenizeResponse>{
                               .parse = ParseDetokenizeRequest,
                               .send = AwaitDetokenize,
                               .answer = DetokenizeAnswer,
                               .refused_param = "tokens"});
}

}  // namespace tokenmill::gateway
