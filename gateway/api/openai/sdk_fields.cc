#include "gateway/api/openai/sdk_fields.h"

#include "gateway/api/json_fields.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

constexpr IgnoredField kServiceTier{"service_tier",
                                    "one server serves every request alike: it has no tiers"};
constexpr IgnoredField kStore{"store",
                              "chat completions are not stored (the Responses API stores)"};
constexpr IgnoredField kMetadata{"metadata",
                                 "it labels stored completions, and chat completions are not "
                                 "stored"};
constexpr IgnoredField kSafetyIdentifier{
    "safety_identifier",
    "it names end users to OpenAI's abuse monitoring, which a self-hosted server does not run"};
constexpr IgnoredField kVerbosity{"verbosity", kVerbosityIgnoredWhy};
constexpr IgnoredField kModalities{"modalities", "text is the only output, as asked"};

std::optional<HttpError> OneOf(const json& body, const char* name,
                               const std::set<std::string_view>& values, const char* listed,
                               std::optional<std::string>& out) {
  GW_RETURN_IF_ERROR(String(body, name, out));
  if (out && values.count(*out) == 0) {
    return BadRequest(std::string(name) + " '" + *out + "' is not one of " + listed, name);
  }
  return std::nullopt;
}

std::optional<HttpError> ParseIgnored(const json& body, SdkFields& out) {
  std::optional<std::string> text;
  // As the Responses API: the tiers that are not a promise of another speed or price.
  GW_RETURN_IF_ERROR(OneOf(body, "service_tier", {"auto", "default"}, "auto, default", text));
  if (text) out.ignored.push_back(kServiceTier);
  std::optional<bool> store;
  GW_RETURN_IF_ERROR(Bool(body, "store", store));
  if (store) out.ignored.push_back(kStore);
  if (const json* metadata = Field(body, "metadata")) {
    if (!metadata->is_object()) {
      return BadRequest("metadata must be an object of strings", "metadata");
    }
    for (const auto& [key, value] : metadata->items()) {
      if (!value.is_string()) {
        return BadRequest("metadata." + key + " must be a string", "metadata");
      }
    }
    out.ignored.push_back(kMetadata);
  }
  text.reset();
  GW_RETURN_IF_ERROR(String(body, "safety_identifier", text));
  if (text) out.ignored.push_back(kSafetyIdentifier);
  text.reset();
  GW_RETURN_IF_ERROR(OneOf(body, "verbosity", {"low", "medium", "high"}, "low, medium, high",
                           text));
  if (text) out.ignored.push_back(kVerbosity);
  return std::nullopt;
}

// ["text"] is what every answer is; audio would be dropped silently, so it is refused.
std::optional<HttpError> ParseModalities(const json& body, SdkFields& out) {
  const json* modalities = Field(body, "modalities");
  if (modalities == nullptr) return std::nullopt;
  if (!modalities->is_array()) {
    return BadRequest("modalities must be a list, [\"text\"]", "modalities");
  }
  for (const json& modality : *modalities) {
    if (modality == "text") continue;
    if (modality == "audio") {
      return BadRequest("modalities: only text is served (this server has no audio output): "
                        "send [\"text\"] or leave modalities unset",
                        "modalities");
    }
    return BadRequest("modalities may hold \"text\" only, got " + modality.dump(), "modalities");
  }
  out.ignored.push_back(kModalities);
  return std::nullopt;
}

// vLLM's way: reasoning_effort is a template variable, and an explicit chat_template_kwargs
// value of it wins.
std::optional<HttpError> ParseReasoningEffort(const json& body, v1::Chat& chat) {
  std::optional<std::string> effort;
  GW_RETURN_IF_ERROR(OneOf(body, "reasoning_effort", {"low", "medium", "high"},
                           "low, medium, high", effort));
  if (!effort) return std::nullopt;
  json kwargs = chat.template_kwargs_json().empty()
                    ? json::object()
                    : json::parse(chat.template_kwargs_json());  // dumped by ParseToolParams
  if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = *effort;
  chat.set_template_kwargs_json(kwargs.dump());
  return std::nullopt;
}

// OpenAI's Predicted Outputs: {"type": "content", "content": "..." or [{"type": "text"}]}.
std::optional<HttpError> ParsePrediction(const json& body, v1::GenerateRequest& generate) {
  const json* prediction = Field(body, "prediction");
  if (prediction == nullptr) return std::nullopt;
  const auto bad = [] {
    return BadRequest("prediction must be {\"type\": \"content\", \"content\": a string or a "
                      "list of text parts}",
                      "prediction");
  };
  if (!HasType(*prediction, "content")) return bad();
  for (const auto& [key, value] : prediction->items()) {
    if (key != "type" && key != "content") return bad();
  }
  const json* content = Field(*prediction, "content");
  if (content == nullptr) return bad();
  std::string text;
  if (content->is_string()) {
    text = content->get<std::string>();
  } else if (content->is_array()) {
    for (const json& part : *content) {
      if (!HasType(part, "text") || !part.contains("text") || !part["text"].is_string()) {
        return bad();
      }
      text += part["text"].get<std::string>();
    }
  } else {
    return bad();
  }
  generate.set_prediction(std::move(text));
  return std::nullopt;
}

}  // namespace

const std::set<std::string_view>& SdkFieldParams() {
  static const std::set<std::string_view> kParams = {
      "service_tier",     "store",            "metadata",               "safety_identifier",
      "verbosity",        "modalities",       "prompt_cache_key",       "reasoning_effort",
      "continue_final_message",               "prediction"};
  return kParams;
}

std::optional<HttpError> ParseSdkFields(const json& body, v1::GenerateRequest& generate,
                                        SdkFields& out) {
  v1::Chat& chat = *generate.mutable_chat();
  GW_RETURN_IF_ERROR(ParseIgnored(body, out));
  GW_RETURN_IF_ERROR(ParsePrediction(body, generate));
  GW_RETURN_IF_ERROR(ParseModalities(body, out));
  std::optional<std::string> key;
  GW_RETURN_IF_ERROR(String(body, "prompt_cache_key", key));
  out.prompt_cache_key = key.value_or("");
  GW_RETURN_IF_ERROR(ParseReasoningEffort(body, chat));

  std::optional<bool> continue_final;
  GW_RETURN_IF_ERROR(Bool(body, "continue_final_message", continue_final));
  if (continue_final.value_or(false)) {
    if (chat.has_add_generation_prompt() && chat.add_generation_prompt()) {
      return BadRequest("continue_final_message and add_generation_prompt cannot both be true: "
                        "the prompt ends inside the last message, so set "
                        "add_generation_prompt to false",
                        "continue_final_message");
    }
    chat.set_continue_final_message(true);
  }
  return std::nullopt;
}

}  // namespace tokenmill::gateway
