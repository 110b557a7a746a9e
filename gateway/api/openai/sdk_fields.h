// The chat completions fields that OpenAI's SDKs and agent frameworks send beyond sampling
// and tools: each honoured where a self-hosted server can (reasoning_effort as the chat
// template's variable, continue_final_message as vLLM's, prompt_cache_key as the routing
// key, prediction as the speculative decoder's draft source), accepted and ignored where it
// cannot apply (service_tier, store, metadata, safety_identifier, verbosity, modalities
// ["text"]), and refused where ignoring it would change the answer silently (modalities asking
// for audio).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/api/ignored_fields.h"
#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

// The chat body fields read here.
const std::set<std::string_view>& SdkFieldParams();

// Why verbosity (chat) and text.verbosity (Responses) are accepted and ignored.
inline constexpr std::string_view kVerbosityIgnoredWhy =
    "it steers OpenAI's own models; here the model and its template decide";

struct SdkFields {
  std::vector<IgnoredField> ignored;  // sent, accepted, without effect
  std::string prompt_cache_key;       // empty: not sent
};

// The fields of `body`, checked, into the chat request `generate`: reasoning_effort (low,
// medium or high) joins chat.template_kwargs_json as `reasoning_effort` unless
// chat_template_kwargs names it (the explicit value wins), so call this after
// ParseToolParams; continue_final_message sets chat's (with add_generation_prompt true it is
// a 400, as vLLM answers); prediction ({"type": "content", "content": text or text parts})
// sets `prediction`.
std::optional<HttpError> ParseSdkFields(const nlohmann::json& body, v1::GenerateRequest& generate,
                                        SdkFields& out);

}  // namespace tokenmill::gateway
