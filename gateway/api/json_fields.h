// Typed reads of a request body's fields, each answering the 400 that names the field when its
// value has the wrong type. Shared by every API the gateway maps (OpenAI, Anthropic).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "gateway/http/http_error.h"

namespace tokenmill::gateway {

#define GW_RETURN_IF_ERROR(expr)                                     \
  do {                                                               \
    if (std::optional<HttpError> gw_error = (expr)) return gw_error; \
  } while (false)

// Whether `object` is an object whose "type" is the string `type`. (json::value("type", "")
// throws when "type" holds a list or a number: a dropped connection instead of a 400.)
bool HasType(const nlohmann::json& object, std::string_view type);

// A present, non-null value (OpenAI and Anthropic treat null as "not given").
const nlohmann::json* Field(const nlohmann::json& body, const char* name);

// Each leaves `out` as it is when the field is absent or null.
std::optional<HttpError> Number(const nlohmann::json& body, const char* name,
                                std::optional<double>& out);
std::optional<HttpError> Integer(const nlohmann::json& body, const char* name, int64_t min,
                                 int64_t max, std::optional<int64_t>& out);
std::optional<HttpError> Bool(const nlohmann::json& body, const char* name,
                              std::optional<bool>& out);
std::optional<HttpError> String(const nlohmann::json& body, const char* name,
                                std::optional<std::string>& out);

// A 400 naming the first key of `body` that is not in `known`.
std::optional<HttpError> RefuseUnknown(const nlohmann::json& body,
                                       const std::set<std::string_view>& known);

}  // namespace tokenmill::gateway
