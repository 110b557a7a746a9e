#include "gateway/api/openai/embeddings.h"

#include <openssl/evp.h>

#include <bit>
#include <limits>
#include <variant>
#include <vector>

#include "gateway/api/json_fields.h"
#include "gateway/api/openai/batch_call.h"
#include "gateway/api/openai/request_mapping.h"
#include "gateway/backends/unary_call.h"

namespace tokenmill::gateway {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// An input of no tokens has nothing to pool; said here with the field's name.
std::optional<HttpError> RefuseEmptyInputs(const json& input,
                                           const std::vector<PromptInput>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string* text = std::get_if<std::string>(&inputs[i]);
    const bool empty = text ? text->empty() : std::get<v1::TokenIds>(inputs[i]).ids().empty();
    if (!empty) continue;
    const std::string where =
        input.is_array() ? "input[" + std::to_string(i) + "]" : std::string("input");
    return BadRequest(where + " is empty: each input needs at least one token", "input");
  }
  return std::nullopt;
}

std::optional<HttpError> ParseInputs(const json& body, v1::EmbedRequest& request) {
  const json* input = Field(body, "input");
  if (input == nullptr) return BadRequest("input is required", "input");
  std::vector<PromptInput> inputs;
  GW_RETURN_IF_ERROR(ParsePromptInputs(*input, "input", inputs));
  GW_RETURN_IF_ERROR(RefuseTooManyInputs(inputs.size(), "input"));
  GW_RETURN_IF_ERROR(RefuseEmptyInputs(*input, inputs));
  for (PromptInput& each : inputs) {
    v1::EmbedInput& out = *request.add_inputs();
    if (std::string* text = std::get_if<std::string>(&each)) {
      out.set_text(std::move(*text));
    } else {
      *out.mutable_token_ids() = std::move(std::get<v1::TokenIds>(each));
    }
  }
  return std::nullopt;
}

int64_t PromptTokens(const v1::EmbedResponse& response) {
  return SumPromptTokens(response.embeddings());
}

json EmbeddingsAnswer(const UnaryReply<EmbedCall, v1::EmbedResponse>& reply) {
  return EmbeddingsJson(reply.call, reply.model, reply.response);
}

}  // namespace

std::optional<HttpError> ParseEmbeddingsRequest(const json& body, EmbedCall& out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  GW_RETURN_IF_ERROR(RefuseUnknown(
      body, {"model", "input", "encoding_format", "dimensions", "user", "cache_salt"}));
  GW_RETURN_IF_ERROR(ParseModelUserSalt(body, out.model, *out.request.mutable_cache_salt()));
  std::optional<std::string> text;
  GW_RETURN_IF_ERROR(String(body, "encoding_format", text));
  if (text && *text != "float" && *text != "base64") {
    return BadRequest("encoding_format '" + *text + "' is not one of float, base64",
                      "encoding_format");
  }
  out.base64 = text == "base64";
  GW_RETURN_IF_ERROR(
      Integer(body, "dimensions", 1, std::numeric_limits<uint32_t>::max(), out.dimensions));
  return ParseInputs(body, out.request);
}

std::optional<HttpError> CheckWidth(const EmbedCall& call, int64_t width) {
  // Width 0: a server without Embed, whose refusal of the call says so.
  if (!call.dimensions || width == 0 || *call.dimensions == width) return std::nullopt;
  return BadRequest("this model does not support matryoshka dimensions: omit dimensions or pass " +
                        std::to_string(width),
                    "dimensions");
}

std::optional<HttpError> CheckDimensions(const v1::ModelInfo& info, const EmbedCall& call) {
  return CheckWidth(call, info.embedding_length());
}

// Another served model's width shows in its reply only.
std::optional<HttpError> CheckReplyDimensions(const EmbedCall& call,
                                              const v1::EmbedResponse& response) {
  if (response.embeddings_size() == 0) return std::nullopt;
  return CheckWidth(call, response.embeddings(0).values_size());
}

std::string Float32Base64(std::span<const float> values) {
  std::string bytes;
  bytes.reserve(values.size() * sizeof(float));
  for (const float value : values) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    for (int shift = 0; shift < 32; shift += 8) bytes.push_back(static_cast<char>(bits >> shift));
  }
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');  // EVP_EncodeBlock adds a NUL
  const int written =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(written));
  return out;
}

json EmbeddingsJson(const EmbedCall& call, const std::string& model,
                    const v1::EmbedResponse& response) {
  json data = json::array();
  for (int i = 0; i < response.embeddings_size(); ++i) {
    const auto& values = response.embeddings(i).values();
    const std::span<const float> floats(values.data(), static_cast<size_t>(values.size()));
    // As doubles, which JSON prints shortest: each parses back to the same float32.
    json embedding = call.base64 ? json(Float32Base64(floats))
                                 : json(std::vector<double>(floats.begin(), floats.end()));
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", PromptOnlyUsage(PromptTokens(response))}};
}

asio::awaitable<void> HandleEmbeddings(HttpExchange& exchange, const HttpRequest& request) {
  co_await HandleUnaryCall(exchange, request,
                           UnaryCall<EmbedCall, v1::EmbedResponse>{
                               .parse = ParseEmbeddingsRequest,
                               .send = AwaitEmbed,
                               .answer = EmbeddingsAnswer,
                               .refused_param = "input",
                               .check = CheckDimensions,
                               .check_reply = CheckReplyDimensions,
                               .tokens_used = PromptTokens,
                               .base_model_only = true});
}

}  // namespace tokenmill::gateway
