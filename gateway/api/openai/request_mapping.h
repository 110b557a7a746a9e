// OpenAI request bodies (/v1/completions, /v1/chat/completions, /tokenize, /detokenize) ->
// tokenmill.v1 requests. Every parameter is either mapped or refused with a 400 naming it;
// none is silently ignored. Values the server checks better (ranges, prompt length) are
// passed on and its INVALID_ARGUMENT comes back as a 400.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gateway/api/ignored_fields.h"
#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

enum class Endpoint { kCompletions, kChatCompletions };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // empty: whichever model the backends serve
  // One Generate per prompt (a completions request may carry several); chat has one.
  std::vector<v1::GenerateRequest> generates;
  uint32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  uint32_t top_logprobs = 0;
  // Completions only. echo: each choice's text (and logprobs) starts with its prompt's; with
  // max_tokens 0 the choice is the prompt alone (`echo_only`: the one token generated is
  // dropped). prompt_logprobs: vLLM's extension, the prompt tokens' top entries.
  bool echo = false;
  bool echo_only = false;
  std::optional<uint32_t> prompt_logprobs;
  // Completions only: candidates generated per prompt (best_of, >= n); the n with the highest
  // cumulative logprob are returned. 1 without best_of: every sequence is a choice.
  uint32_t best_of = 1;
  // The field that set sampling.structured_output (response_format, grammar, ...), named in
  // the 400 when the server refuses what it holds; empty without one.
  std::string structured_output_param;
  // Requests with equal keys go to the same backend (its prefix cache holds their prefix).
  std::string affinity_key;
  // Fields sent that change nothing here (the handler logs each once per gateway).
  std::vector<IgnoredField> ignored_fields;
};

// How many characters of the prompt (or of the system messages) the affinity key keeps:
// about the first KV blocks, where requests that share a system prompt agree.
inline constexpr size_t kAffinityPrefixChars = 256;

// The affinity key of a chat: its system messages (or the start of its first message) and
// its tools. `chat` has at least one message.
std::string ChatAffinityKey(const v1::Chat& chat);

// One prompt: its text, or its token ids.
using PromptInput = std::variant<std::string, v1::TokenIds>;
// OpenAI's prompt shapes (completions' `prompt`, embeddings' `input`): "text", ["text", ...],
// [id, ...] or [[id, ...], ...], each prompt appended to `out`. Refusals name `param`.
std::optional<HttpError> ParsePromptInputs(const nlohmann::json& value, const std::string& param,
                                           std::vector<PromptInput>& out);

std::optional<HttpError> ParseCompletionRequest(const nlohmann::json& body, Endpoint endpoint,
                                                CompletionRequest& out);

struct TokenizeCall {
  std::string model;
  v1::TokenizeRequest request;
};
std::optional<HttpError> ParseTokenizeRequest(const nlohmann::json& body, TokenizeCall& out);

struct DetokenizeCall {
  std::string model;
  v1::DetokenizeRequest request;
};
std::optional<HttpError> ParseDetokenizeRequest(const nlohmann::json& body, DetokenizeCall& out);

// The chat messages of an OpenAI "messages" array (content as a string or a list of text
// parts; "developer" is the system role under its newer name).
std::optional<HttpError> ParseMessages(const nlohmann::json& messages, v1::Chat& chat);

}  // namespace tokenmill::gateway
