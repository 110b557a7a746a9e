#include "gateway/api/openai/request_mapping.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string_view>
#include <variant>

#include "common/request_limits.h"
#include "gateway/api/json_fields.h"
#include "gateway/api/openai/beam_search.h"
#include "gateway/api/openai/sdk_fields.h"
#include "gateway/api/openai/structured_output.h"
#include "gateway/api/openai/tool_calls.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

// logprobs' and prompt_logprobs' top entries at most (the server's limit too).
constexpr int64_t kMaxLogprobs = 20;

// Parameters both endpoints share, in the order OpenAI documents them.
const std::set<std::string_view>& CommonParams() {
  static const std::set<std::string_view> kParams = {
      "model",          "max_tokens",         "temperature",       "top_p",
      "top_k",          "min_p",              "n",                 "stream",
      "stream_options", "stop",               "seed",              "presence_penalty",
      "frequency_penalty", "repetition_penalty", "logit_bias",     "logprobs",
      "user",           "ignore_eos",         "min_tokens",        "stop_token_ids",
      "cache_salt",     "priority",           "kv_window"};
  return kParams;
}

// Types only (a number, an integer that fits the wire's field): the ranges are the server's to
// check, once, and its refusal names the field.
std::optional<HttpError> ParseSampling(const json& body, v1::SamplingParams& s) {
  std::optional<double> d;
  GW_RETURN_IF_ERROR(Number(body, "temperature", d));
  if (d) s.set_temperature(static_cast<float>(*d));
  d.reset();
  GW_RETURN_IF_ERROR(Number(body, "top_p", d));
  if (d) s.set_top_p(static_cast<float>(*d));
  d.reset();
  GW_RETURN_IF_ERROR(Number(body, "min_p", d));
  if (d) s.set_min_p(static_cast<float>(*d));
  d.reset();
  GW_RETURN_IF_ERROR(Number(body, "presence_penalty", d));
  if (d) s.set_presence_penalty(static_cast<float>(*d));
  d.reset();
  GW_RETURN_IF_ERROR(Number(body, "frequency_penalty", d));
  if (d) s.set_frequency_penalty(static_cast<float>(*d));
  d.reset();
  GW_RETURN_IF_ERROR(Number(body, "repetition_penalty", d));
  if (d) s.set_repetition_penalty(static_cast<float>(*d));

  std::optional<int64_t> i;
  GW_RETURN_IF_ERROR(Integer(body, "top_k", std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max(), i));
  if (i) s.set_top_k(static_cast<int32_t>(*i));
  i.reset();
  GW_RETURN_IF_ERROR(Integer(body, "seed", std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max(), i));
  if (i) s.set_seed(static_cast<uint64_t>(*i));
  i.reset();
  GW_RETURN_IF_ERROR(Integer(body, "min_tokens", 0, std::numeric_limits<uint32_t>::max(), i));
  if (i) s.set_min_tokens(static_cast<uint32_t>(*i));

  if (const json* bias = Field(body, "logit_bias")) {
    if (!bias->is_object()) {
      return BadRequest("logit_bias must map token ids (as strings) to numbers", "logit_bias");
    }
    for (const auto& [key, value] : bias->items()) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return BadRequest("logit_bias key '" + key + "' is not a token id", "logit_bias");
      }
      if (!value.is_number()) return BadRequest("logit_bias values must be numbers", "logit_bias");
      (*s.mutable_logit_bias())[static_cast<int32_t>(id)] = value.get<float>();
    }
  }
  return std::nullopt;
}

std::optional<HttpError> ParseStop(const json& body, v1::GenerateRequest& g) {
  if (const json* stop = Field(body, "stop")) {
    if (stop->is_string()) {
      g.add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) return BadRequest("stop must be a string or a list of strings", "stop");
        g.add_stop(s.get<std::string>());
      }
    } else {
      return BadRequest("stop must be a string or a list of strings", "stop");
    }
  }
  if (const json* ids = Field(body, "stop_token_ids")) {
    if (!ids->is_array()) return BadRequest("stop_token_ids must be a list of token ids", "stop_token_ids");
    for (const json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return BadRequest("stop_token_ids must be a list of token ids", "stop_token_ids");
      }
      g.add_stop_token_ids(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return std::nullopt;
}

// best_of candidates per prompt, n of them returned (OpenAI's rule: not streamed).
std::optional<HttpError> ParseBestOf(const json& body, CompletionRequest& out,
                                     v1::GenerateRequest& g) {
  std::optional<int64_t> best_of;
  GW_RETURN_IF_ERROR(Integer(body, "best_of", 1, kMaxSequencesPerRequest, best_of));
  if (!best_of || *best_of == out.n) return std::nullopt;
  if (*best_of < out.n) {
    return BadRequest("best_of = " + std::to_string(*best_of) + " must be at least n = " +
                          std::to_string(out.n) + ": raise best_of or lower n",
                      "best_of");
  }
  std::optional<bool> stream;
  GW_RETURN_IF_ERROR(Bool(body, "stream", stream));
  if (stream.value_or(false)) {
    return BadRequest("best_of cannot be used with stream: set stream to false or leave best_of "
                      "unset",
                      "best_of");
  }
  out.best_of = static_cast<uint32_t>(*best_of);
  g.set_n(out.best_of);
  return std::nullopt;
}

// echo, prompt_logprobs and logprobs (an integer here): completions' own fields.
std::optional<HttpError> ParseCompletionsLogprobs(const json& body, CompletionRequest& out,
                                                  v1::GenerateRequest& g) {
  std::optional<bool> echo;
  GW_RETURN_IF_ERROR(Bool(body, "echo", echo));
  out.echo = echo.value_or(false);
  if (const json* suffix = Field(body, "suffix"); suffix != nullptr && *suffix != "") {
    return BadRequest("suffix is not supported: leave it unset", "suffix");
  }
  std::optional<int64_t> top;
  GW_RETURN_IF_ERROR(Integer(body, "logprobs", 0, kMaxLogprobs, top));
  if (top) {
    out.logprobs = true;
    out.top_logprobs = static_cast<uint32_t>(*top);
  }
  top.reset();
  GW_RETURN_IF_ERROR(Integer(body, "prompt_logprobs", 0, kMaxLogprobs, top));
  if (top) out.prompt_logprobs = static_cast<uint32_t>(*top);
  // The prompt's entries come first in an echoed choice's logprobs.
  const bool echo_logprobs = out.echo && out.logprobs;
  if (out.prompt_logprobs || echo_logprobs) {
    g.set_prompt_logprobs(std::max(out.prompt_logprobs.value_or(0),
                                   echo_logprobs ? out.top_logprobs : 0));
  }
  // max_tokens 0 with echo: the prompt alone, as vLLM answers (lm-eval scores prompts so).
  if (out.echo && g.has_max_tokens() && g.max_tokens() == 0) {
    out.echo_only = true;
    g.set_max_tokens(1);
  }
  return std::nullopt;
}

// Everything but the input and logprobs: one template the prompts are copied from.
std::optional<HttpError> ParseGenerateCommon(const json& body, Endpoint endpoint,
                                             CompletionRequest& out, v1::GenerateRequest& g) {
  GW_RETURN_IF_ERROR(ParseSampling(body, *g.mutable_sampling()));
  GW_RETURN_IF_ERROR(
      ParseStructuredOutput(body, *g.mutable_sampling(), out.structured_output_param));
  GW_RETURN_IF_ERROR(ParseStop(body, g));

  std::optional<int64_t> max_tokens;
  GW_RETURN_IF_ERROR(Integer(body, "max_tokens", 0, std::numeric_limits<uint32_t>::max(),
                             max_tokens));
  if (endpoint == Endpoint::kChatCompletions) {
    std::optional<int64_t> max_completion;
    GW_RETURN_IF_ERROR(Integer(body, "max_completion_tokens", 0,
                               std::numeric_limits<uint32_t>::max(), max_completion));
    if (max_completion) {
      if (max_tokens && *max_tokens != *max_completion) {
        return BadRequest("give max_tokens or max_completion_tokens, not both",
                          "max_completion_tokens");
      }
      max_tokens = max_completion;
    }
  }
  if (max_tokens) g.set_max_tokens(static_cast<uint32_t>(*max_tokens));

  std::optional<int64_t> n;
  GW_RETURN_IF_ERROR(Integer(body, "n", 1, kMaxSequencesPerRequest, n));
  if (n) {
    out.n = static_cast<uint32_t>(*n);
    if (*n > 1) g.set_n(static_cast<uint32_t>(*n));
  }
  // Before best_of: with beam search, best_of has its own refusal.
  GW_RETURN_IF_ERROR(ParseBeamSearch(body, out.n, g, out.ignored_fields));
  if (endpoint == Endpoint::kCompletions) GW_RETURN_IF_ERROR(ParseBestOf(body, out, g));

  std::optional<bool> flag;
  GW_RETURN_IF_ERROR(Bool(body, "ignore_eos", flag));
  if (flag) g.set_ignore_eos(*flag);
  flag.reset();
  GW_RETURN_IF_ERROR(Bool(body, "stream", flag));
  out.stream = flag.value_or(false);
  if (const json* options = Field(body, "stream_options")) {
    if (!out.stream) return BadRequest("stream_options is only allowed with stream: true", "stream_options");
    if (!options->is_object()) return BadRequest("stream_options must be an object", "stream_options");
    for (const auto& [key, value] : options->items()) {
      if (key == "include_usage") {
        if (!value.is_boolean()) {
          return BadRequest("stream_options.include_usage must be true or false", "stream_options");
        }
        out.include_usage = value.get<bool>();
      } else if (key != "continuous_usage_stats" || value != false) {
        return BadRequest("stream_options." + key + " is not supported", "stream_options");
      }
    }
  }

  // tokenmill's bounded-memory generation (attention sinks): {"sink_tokens", "window_tokens"}.
  if (const json* window = Field(body, "kv_window")) {
    if (!window->is_object()) {
      return BadRequest("kv_window must be an object {\"sink_tokens\", \"window_tokens\"}",
                        "kv_window");
    }
    for (const auto& [key, value] : window->items()) {
      if (key != "sink_tokens" && key != "window_tokens") {
        return BadRequest("kv_window." + key + " is not a kv_window field", "kv_window");
      }
    }
    std::optional<int64_t> tokens;
    GW_RETURN_IF_ERROR(Integer(*window, "sink_tokens", 0, std::numeric_limits<uint32_t>::max(),
                               tokens));
    v1::KvWindow& kv_window = *g.mutable_kv_window();
    if (tokens) kv_window.set_sink_tokens(static_cast<uint32_t>(*tokens));
    tokens.reset();
    GW_RETURN_IF_ERROR(Integer(*window, "window_tokens", 0,
                               std::numeric_limits<uint32_t>::max(), tokens));
    if (tokens) kv_window.set_window_tokens(static_cast<uint32_t>(*tokens));
  }

  std::optional<int64_t> priority;
  GW_RETURN_IF_ERROR(Integer(body, "priority", std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max(), priority));
  if (priority) g.set_priority(static_cast<int32_t>(*priority));
  std::optional<std::string> text;
  GW_RETURN_IF_ERROR(String(body, "cache_salt", text));
  if (text) g.set_cache_salt(*text);
  text.reset();
  // `user` identifies the end user for abuse monitoring; the gateway logs it at debug level.
  GW_RETURN_IF_ERROR(String(body, "user", text));
  text.reset();
  GW_RETURN_IF_ERROR(String(body, "model", text));
  out.model = text.value_or("");
  return std::nullopt;
}

std::string Prefix(std::string_view s) { return std::string(s.substr(0, kAffinityPrefixChars)); }

std::string TokenIdsKey(const v1::TokenIds& ids) {
  std::string key = "ids:";
  for (int i = 0; i < ids.ids_size() && i < 64; ++i) key += std::to_string(ids.ids(i)) + ",";
  return key;
}

// prompt: "text", ["text", ...], [id, ...] or [[id, ...], ...].
std::optional<HttpError> ParsePrompts(const json& body, const v1::GenerateRequest& common,
                                      CompletionRequest& out) {
  const json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return BadRequest("prompt is required", "prompt");
  std::vector<PromptInput> inputs;
  GW_RETURN_IF_ERROR(ParsePromptInputs(*prompt, "prompt", inputs));
  for (PromptInput& input : inputs) {
    v1::GenerateRequest& generate = out.generates.emplace_back(common);
    if (std::string* text = std::get_if<std::string>(&input)) {
      generate.set_text(std::move(*text));
    } else {
      *generate.mutable_token_ids() = std::move(std::get<v1::TokenIds>(input));
    }
  }
  if (out.generates.size() > static_cast<size_t>(kMaxPromptsPerRequest)) {
    return BadRequest("at most " + std::to_string(kMaxPromptsPerRequest) +
                          " prompts per request",
                      "prompt");
  }
  // Each prompt runs n sequences: together they may not exceed one batch.
  const size_t sequences = out.generates.size() * std::max<uint32_t>(1, common.n());
  if (sequences > static_cast<size_t>(kMaxSequencesPerBatchRequest)) {
    return BadRequest(std::to_string(out.generates.size()) + " prompts × n = " +
                          std::to_string(sequences) + " sequences; at most " +
                          std::to_string(kMaxSequencesPerBatchRequest) +
                          " per request: send fewer prompts or a smaller n",
                      "n");
  }
  const v1::GenerateRequest& first = out.generates.front();
  out.affinity_key = first.has_token_ids() ? TokenIdsKey(first.token_ids()) : Prefix(first.text());
  return std::nullopt;
}

std::optional<HttpError> ParseContent(const json& content, size_t index, std::string& text) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) {
    text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return BadRequest(param + " must be a string or a list of text parts", "messages");
  }
  for (const json& part : content) {
    if (!HasType(part, "text") || !part.contains("text") || !part["text"].is_string()) {
      return BadRequest(param + ": only parts {\"type\": \"text\", \"text\": ...} are supported",
                        "messages");
    }
    text += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<HttpError> ParseChatInput(const json& body, CompletionRequest& out,
                                        v1::GenerateRequest& g) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr) return BadRequest("messages is required", "messages");
  v1::Chat& chat = *g.mutable_chat();
  GW_RETURN_IF_ERROR(ParseMessages(*messages, chat));
  GW_RETURN_IF_ERROR(ParseToolParams(body, chat));
  GW_RETURN_IF_ERROR(RefuseTwoConstraints(chat, out.structured_output_param));
  std::optional<bool> add_generation_prompt;
  GW_RETURN_IF_ERROR(Bool(body, "add_generation_prompt", add_generation_prompt));
  if (add_generation_prompt) chat.set_add_generation_prompt(*add_generation_prompt);
  SdkFields sdk;
  GW_RETURN_IF_ERROR(ParseSdkFields(body, g, sdk));
  out.ignored_fields.insert(out.ignored_fields.end(), sdk.ignored.begin(), sdk.ignored.end());
  // OpenAI's meaning: requests that share the key share cached prefixes, so one backend.
  out.affinity_key = sdk.prompt_cache_key.empty() ? ChatAffinityKey(chat)
                                                  : "cache_key:" + sdk.prompt_cache_key;
  return std::nullopt;
}

}  // namespace

std::optional<HttpError> ParsePromptInputs(const json& value, const std::string& param,
                                           std::vector<PromptInput>& out) {
  const auto token_ids = [&](const json& list) -> std::optional<HttpError> {
    v1::TokenIds& ids = std::get<v1::TokenIds>(out.emplace_back(v1::TokenIds()));
    for (const json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return BadRequest(param + " token ids must be non-negative integers", param);
      }
      ids.add_ids(static_cast<int32_t>(id.get<int64_t>()));
    }
    return std::nullopt;
  };
  const auto bad = [&] {
    return BadRequest(param + " must be a string, a list of strings, a list of token ids or a "
                              "list of lists of token ids",
                      param);
  };
  if (value.is_string()) {
    out.emplace_back(value.get<std::string>());
    return std::nullopt;
  }
  if (!value.is_array()) return bad();
  if (value.empty()) return BadRequest(param + " is empty", param);
  if (value.front().is_number()) return token_ids(value);
  for (const json& item : value) {
    if (item.is_string()) {
      out.emplace_back(item.get<std::string>());
    } else if (item.is_array()) {
      GW_RETURN_IF_ERROR(token_ids(item));
    } else {
      return bad();
    }
  }
  return std::nullopt;
}

std::string ChatAffinityKey(const v1::Chat& chat) {
  // Same system messages, same backend; otherwise the start of the first message.
  std::string key;
  for (const v1::ChatMessage& m : chat.messages()) {
    if (m.role() != "system") break;
    key += m.content();
    key += '\0';
  }
  std::string affinity = key.empty() ? "chat:" + Prefix(chat.messages(0).content())
                                     : "system:" + Prefix(key);
  affinity += chat.tools_json().empty() ? "" : Prefix(chat.tools_json());
  return affinity;
}

std::optional<HttpError> ParseMessages(const json& messages, v1::Chat& chat) {
  if (!messages.is_array() || messages.empty()) {
    return BadRequest("messages must be a non-empty list of {role, content}", "messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return BadRequest(where + " must be an object", "messages");
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content" && !IsToolMessageKey(key) && !value.is_null()) {
        return BadRequest(where + "." + key +
                              " is not supported: send role, content, name, tool_calls, "
                              "tool_call_id and reasoning_content only",
                          "messages");
      }
    }
    if (!m.contains("role") || !m["role"].is_string()) {
      return BadRequest(where + ".role must be a string", "messages");
    }
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return BadRequest(where + ".role '" + role +
                            "' is not one of system, developer, user, assistant, tool",
                        "messages");
    }
    v1::ChatMessage& out = *chat.add_messages();
    out.set_role(role);
    GW_RETURN_IF_ERROR(ParseMessageToolFields(m, i, role, out));
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (role != "assistant") return BadRequest(where + ".content is required", "messages");
      continue;
    }
    GW_RETURN_IF_ERROR(ParseContent(*content, i, *out.mutable_content()));
  }
  return std::nullopt;
}

std::optional<HttpError> ParseCompletionRequest(const json& body, Endpoint endpoint,
                                                CompletionRequest& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  std::set<std::string_view> known = CommonParams();
  known.insert(StructuredOutputParams().begin(), StructuredOutputParams().end());
  known.insert(BeamSearchFieldParams().begin(), BeamSearchFieldParams().end());
  if (endpoint == Endpoint::kCompletions) {
    known.insert({"prompt", "best_of", "echo", "suffix", "prompt_logprobs"});
  } else {
    known.insert({"messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt"});
    known.insert(ToolParams().begin(), ToolParams().end());
    known.insert(SdkFieldParams().begin(), SdkFieldParams().end());
  }
  GW_RETURN_IF_ERROR(RefuseUnknown(body, known));
  out.endpoint = endpoint;

  v1::GenerateRequest common;
  GW_RETURN_IF_ERROR(ParseGenerateCommon(body, endpoint, out, common));

  if (endpoint == Endpoint::kCompletions) {
    GW_RETURN_IF_ERROR(ParseCompletionsLogprobs(body, out, common));
  } else {
    std::optional<bool> logprobs;
    GW_RETURN_IF_ERROR(Bool(body, "logprobs", logprobs));
    out.logprobs = logprobs.value_or(false);
    std::optional<int64_t> top;
    GW_RETURN_IF_ERROR(
        Integer(body, "top_logprobs", 0, std::numeric_limits<uint32_t>::max(), top));
    // Set at all (0 too) without logprobs, as OpenAI and vLLM refuse it: the client asked
    // for something it will not get.
    if (top && !out.logprobs) {
      return BadRequest("top_logprobs needs logprobs: true", "top_logprobs");
    }
    out.top_logprobs = static_cast<uint32_t>(top.value_or(0));
  }
  // best_of ranks its candidates by their logprobs: asked for even when not shown.
  if (out.logprobs || out.best_of > out.n) {
    common.set_logprobs(true);
    common.set_top_logprobs(out.top_logprobs);
  }

  if (endpoint == Endpoint::kCompletions) {
    return ParsePrompts(body, common, out);
  }
  GW_RETURN_IF_ERROR(ParseChatInput(body, out, common));
  out.generates.push_back(std::move(common));
  return std::nullopt;
}

std::optional<HttpError> ParseTokenizeRequest(const json& body, TokenizeCall& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  GW_RETURN_IF_ERROR(RefuseUnknown(
      body, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
             "tools", "chat_template_kwargs", "continue_final_message"}));
  std::optional<std::string> model;
  GW_RETURN_IF_ERROR(String(body, "model", model));
  out.model = model.value_or("");
  std::optional<bool> add_special;
  GW_RETURN_IF_ERROR(Bool(body, "add_special_tokens", add_special));
  if (add_special) out.request.set_add_special_tokens(*add_special);
  const json* prompt = Field(body, "prompt");
  const json* messages = Field(body, "messages");
  if ((prompt == nullptr) == (messages == nullptr)) {
    return BadRequest("give either prompt or messages", prompt ? "messages" : "prompt");
  }
  if (prompt != nullptr) {
    for (const char* chat_only : {"tools", "chat_template_kwargs", "continue_final_message"}) {
      if (Field(body, chat_only) != nullptr) {
        return BadRequest(std::string(chat_only) + " applies to messages, not to a prompt",
                          chat_only);
      }
    }
    if (!prompt->is_string()) return BadRequest("prompt must be a string", "prompt");
    out.request.set_text(prompt->get<std::string>());
    return std::nullopt;
  }
  v1::Chat& chat = *out.request.mutable_chat();
  GW_RETURN_IF_ERROR(ParseMessages(*messages, chat));
  std::optional<bool> add_generation_prompt;
  GW_RETURN_IF_ERROR(Bool(body, "add_generation_prompt", add_generation_prompt));
  if (add_generation_prompt) chat.set_add_generation_prompt(*add_generation_prompt);
  // vLLM's chat tokenize: the prompt as chat completions would render it, tools included.
  GW_RETURN_IF_ERROR(ParseToolParams(body, chat));
  std::optional<bool> continue_final;
  GW_RETURN_IF_ERROR(Bool(body, "continue_final_message", continue_final));
  chat.set_continue_final_message(continue_final.value_or(false));
  return std::nullopt;
}

std::optional<HttpError> ParseDetokenizeRequest(const json& body, DetokenizeCall& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  GW_RETURN_IF_ERROR(RefuseUnknown(body, {"model", "tokens", "render_special"}));
  std::optional<std::string> model;
  GW_RETURN_IF_ERROR(String(body, "model", model));
  out.model = model.value_or("");
  const json* tokens = Field(body, "tokens");
  if (tokens == nullptr || !tokens->is_array()) {
    return BadRequest("tokens must be a list of token ids", "tokens");
  }
  for (const json& id : *tokens) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return BadRequest("tokens must be a list of non-negative token ids", "tokens");
    }
    out.request.add_token_ids(static_cast<int32_t>(id.get<int64_t>()));
  }
  std::optional<bool> render_special;
  GW_RETURN_IF_ERROR(Bool(body, "render_special", render_special));
  out.request.set_render_special(render_special.value_or(false));
  return std::nullopt;
}

}  // namespace tokenmill::gateway
