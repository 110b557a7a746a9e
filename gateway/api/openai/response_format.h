// OpenAI response bodies built from tokenmill.v1 responses: whole completions, stream chunks
// (Server-Sent Events), usage and logprobs. Pure functions of their inputs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gateway/api/openai/request_mapping.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

// What the response says about the request as a whole.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// "stop", "length", "tool_calls". (An abort never gets here: the generation driver answers it
// as a 503 error, generation.h.)
std::string FinishReasonName(v1::FinishReason reason);

// One token's logprob entry, its texts already looked up.
struct TokenLogprobText {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
  // An echoed prompt's first token: nothing precedes it, its logprob and top are null.
  bool no_logprob = false;
};

// The logprobs object of a choice (or of one chunk of it). `text_offset` is where the first
// token starts in the choice's text (completions only).
nlohmann::json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprobText>& tokens,
                            size_t text_offset);

nlohmann::json UsageJson(uint64_t prompt_tokens, uint64_t completion_tokens,
                         uint64_t cached_tokens);

// The accumulated state of one choice.
struct ChoiceResult {
  std::string text;
  std::optional<v1::FinishReason> finish_reason;
  std::vector<TokenLogprobText> logprobs;  // when the request asked for them
  std::string stop_string;
  // Chat: what the server parsed out of the output besides its content (`text`).
  std::string reasoning;
  std::vector<v1::ToolCall> tool_calls;
  // Completions with prompt_logprobs: vLLM's list, one per prompt token (null first).
  std::optional<nlohmann::json> prompt_logprobs;
};

// The whole (non-streamed) response.
nlohmann::json CompletionJson(const ResponseHeader& header,
                              const std::vector<ChoiceResult>& choices, bool with_logprobs,
                              const nlohmann::json& usage);

// One stream chunk for one choice: a text delta, perhaps with logprobs and finish reason.
// `first` adds the assistant role to a chat delta.
nlohmann::json ChunkJson(const ResponseHeader& header, uint32_t index, const std::string& delta,
                         const std::optional<nlohmann::json>& logprobs,
                         std::optional<v1::FinishReason> finish_reason, bool first);

// The last chunk when stream_options.include_usage is set: no choices, the usage.
nlohmann::json UsageChunkJson(const ResponseHeader& header, const nlohmann::json& usage);

// JSON text; bytes that are not UTF-8 (a token's half character) become U+FFFD.
std::string DumpJson(const nlohmann::json& value);

// "data: <json>\n\n"; the stream ends with SseDone().
std::string SseEvent(const nlohmann::json& data);
std::string SseDone();
// "event: <data.type>\ndata: <json>\n\n": the Anthropic and Responses streams name each event.
std::string SseNamedEvent(const nlohmann::json& data);

// A backend's model's /v1/models entries, as vLLM lists them: one per name it is called by
// (`names`, BackendPool::ModelNamesOf: the first is its id, their "root"; "parent" null), then
// one per LoRA adapter ("root" and "parent" the base model's id).
nlohmann::json ModelEntries(const std::vector<std::string>& names, const v1::ModelInfo& info);

// Bytes of a UTF-8 string as OpenAI's chat logprobs "bytes" lists them.
nlohmann::json Utf8Bytes(const std::string& text);

}  // namespace tokenmill::gateway
