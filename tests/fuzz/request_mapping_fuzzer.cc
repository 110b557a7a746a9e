// libFuzzer target: any bytes as the body of each endpoint the gateway maps (OpenAI's
// completions, chat completions, tokenize, detokenize; Responses; Anthropic Messages and
// count_tokens) end in a request or an HttpError, never a crash. The body is parsed as the
// gateway parses it (request_body.h). An input behind tests/fuzz/deep_json.h's marker is a body
// whose "@@" stand for deep JSON (inside a string: tool-call arguments).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gateway/api/anthropic/anthropic_messages.h"
#include "gateway/api/openai/request_mapping.h"
#include "gateway/api/responses/responses_api.h"
#include "gateway/http/request_body.h"
#include "tests/fuzz/deep_json.h"

namespace gw = tokenmill::gateway;

namespace {

// An error must be something the gateway can send: a 4xx status and a message.
void CheckError(const std::optional<gw::HttpError>& error) {
  if (error && (error->status < 400 || error->status >= 500 || error->message.empty())) {
    __builtin_trap();
  }
  if (error) (void)error->ToJson().dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string deepened;
  if (tokenmill::fuzz::DeepJson deep; tokenmill::fuzz::TakeDeepJson(data, size, deep)) {
    deepened = tokenmill::fuzz::ReplaceMarks(deep.rest, deep.text);
    bytes = deepened;
  }
  nlohmann::json body;
  const std::optional<gw::HttpError> refused = gw::ParseRequestBody(bytes, body);
  CheckError(refused);
  if (refused) return 0;
  for (const gw::Endpoint endpoint : {gw::Endpoint::kCompletions, gw::Endpoint::kChatCompletions}) {
    gw::CompletionRequest request;
    const std::optional<gw::HttpError> error = gw::ParseCompletionRequest(body, endpoint, request);
    CheckError(error);
    // What the gateway sends upstream must serialize.
    if (!error) {
      for (const auto& generate : request.generates) (void)generate.SerializeAsString();
    }
  }
  gw::ResponsesRequest responses;
  const std::optional<gw::HttpError> responses_error = gw::ParseResponsesRequest(body, responses);
  CheckError(responses_error);
  if (!responses_error) {
    tokenmill::v1::Chat chat;
    gw::BuildResponsesChat(responses, {}, chat);
    (void)chat.SerializeAsString();
  }
  gw::MessagesRequest messages;
  const std::optional<gw::HttpError> messages_error = gw::ParseMessagesRequest(body, messages);
  CheckError(messages_error);
  if (!messages_error) (void)messages.generate.SerializeAsString();
  gw::TokenizeCall count_tokens;
  CheckError(gw::ParseCountTokensRequest(body, count_tokens));
  gw::TokenizeCall tokenize;
  CheckError(gw::ParseTokenizeRequest(body, tokenize));
  gw::DetokenizeCall detokenize;
  CheckError(gw::ParseDetokenizeRequest(body, detokenize));
  return 0;
}
