// libFuzzer target: any bytes as the body of each OpenAI endpoint the gateway maps
// (completions, chat completions, tokenize, detokenize) end in a request or an HttpError,
// never a crash. The body is parsed as the gateway parses it (request_body.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gateway/api/openai/request_mapping.h"
#include "gateway/http/request_body.h"

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
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
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
  gw::TokenizeCall tokenize;
  CheckError(gw::ParseTokenizeRequest(body, tokenize));
  gw::DetokenizeCall detokenize;
  CheckError(gw::ParseDetokenizeRequest(body, detokenize));
  return 0;
}
