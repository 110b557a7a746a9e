#include "gateway/api/openai/response_format.h"

#include "gateway/api/openai/tool_calls.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

// Token texts from the model may hold bytes that are not UTF-8 (a character split across
// tokens): dump them with U+FFFD instead of throwing.
constexpr auto kReplace = json::error_handler_t::replace;

const char* ObjectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json Envelope(const ResponseHeader& header, bool chunk) {
  return {{"id", header.id},
          {"object", ObjectName(header.endpoint, chunk)},
          {"created", header.created},
          {"model", header.model}};
}

}  // namespace

std::string FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "stop";
  }
}

json Utf8Bytes(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprobText>& tokens,
                  size_t text_offset) {
  if (endpoint == Endpoint::kChatCompletions) {
    json content = json::array();
    for (const TokenLogprobText& t : tokens) {
      json top = json::array();
      for (const auto& [token, logprob] : t.top) {
        top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", Utf8Bytes(token)}});
      }
      content.push_back({{"token", t.token},
                         {"logprob", t.logprob},
                         {"bytes", Utf8Bytes(t.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens_json = json::array();
  json token_logprobs = json::array();
  json top_logprobs = json::array();
  json offsets = json::array();
  size_t offset = text_offset;
  for (const TokenLogprobText& t : tokens) {
    tokens_json.push_back(t.token);
    json top = json::object();
    for (const auto& [token, logprob] : t.top) {
      if (!top.contains(token)) top[token] = logprob;
    }
    token_logprobs.push_back(t.no_logprob ? json(nullptr) : json(t.logprob));
    top_logprobs.push_back(t.no_logprob ? json(nullptr) : top);
    offsets.push_back(offset);
    offset += t.token.size();
  }
  return {{"tokens", tokens_json},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

json UsageJson(uint64_t prompt_tokens, uint64_t completion_tokens, uint64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json CompletionJson(const ResponseHeader& header, const std::vector<ChoiceResult>& choices,
                    bool with_logprobs, const json& usage) {
  json body = Envelope(header, false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json logprobs = nullptr;
    if (with_logprobs) logprobs = LogprobsJson(header.endpoint, c.logprobs, 0);
    json choice = {{"index", i},
                   {"logprobs", logprobs},
                   {"finish_reason", FinishReasonName(c.finish_reason.value_or(
                                         v1::FINISH_REASON_UNSPECIFIED))}};
    if (!c.stop_string.empty()) choice["stop_reason"] = c.stop_string;
    if (c.prompt_logprobs) choice["prompt_logprobs"] = *c.prompt_logprobs;
    if (header.endpoint == Endpoint::kCompletions) {
      choice["text"] = c.text;
    } else {
      choice["message"] = ChatMessageJson(c.text, c.reasoning, c.tool_calls);
    }
    list.push_back(std::move(choice));
  }
  body["choices"] = std::move(list);
  body["usage"] = usage;
  return body;
}

json ChunkJson(const ResponseHeader& header, uint32_t index, const std::string& delta,
               const std::optional<json>& logprobs, std::optional<v1::FinishReason> finish_reason,
               bool first) {
  json body = Envelope(header, true);
  json choice = {{"index", index},
                 {"logprobs", logprobs.value_or(json(nullptr))},
                 {"finish_reason", nullptr}};
  if (finish_reason) choice["finish_reason"] = FinishReasonName(*finish_reason);
  if (header.endpoint == Endpoint::kCompletions) {
    choice["text"] = delta;
  } else {
    json d = json::object();
    if (first) d["role"] = "assistant";
    if (!delta.empty() || first) d["content"] = delta;
    choice["delta"] = std::move(d);
  }
  body["choices"] = json::array({std::move(choice)});
  return body;
}

json UsageChunkJson(const ResponseHeader& header, const json& usage) {
  json body = Envelope(header, true);
  body["choices"] = json::array();
  body["usage"] = usage;
  return body;
}

std::string DumpJson(const json& value) { return value.dump(-1, ' ', false, kReplace); }

std::string SseEvent(const json& data) { return "data: " + DumpJson(data) + "\n\n"; }

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string SseNamedEvent(const json& data) {
  return "event: " + data.at("type").get<std::string>() + "\ndata: " + DumpJson(data) + "\n\n";
}

json ModelEntries(const std::vector<std::string>& names, const v1::ModelInfo& info) {
  const std::string& id = names.front();
  json entries = json::array();
  const auto entry = [&](const std::string& name, const json& parent) {
    entries.push_back({{"id", name},
                       {"object", "model"},
                       {"created", info.created()},
                       {"owned_by", "tokenmill"},
                       {"root", id},
                       {"parent", parent},
                       {"max_model_len", info.max_model_len()},
                       {"capabilities", {{"tool_call_format", info.tool_call_format()}}}});
  };
  for (const std::string& name : names) entry(name, nullptr);
  for (const std::string& adapter : info.lora_adapters()) entry(adapter, id);
  // The server's other models (the first of ModelInfo.models is the default, listed above).
  for (int i = 1; i < info.models_size(); ++i) {
    entries.push_back({{"id", info.models(i)},
                       {"object", "model"},
                       {"created", info.created()},
                       {"owned_by", "tokenmill"},
                       {"root", info.models(i)},
                       {"parent", nullptr}});
  }
  return entries;
}

}  // namespace tokenmill::gateway
