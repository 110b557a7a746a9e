#include "gateway/api/json_fields.h"

#include <cmath>

namespace tokenmill::gateway {

using nlohmann::json;

bool HasType(const json& object, std::string_view type) {
  if (!object.is_object()) return false;
  const auto it = object.find("type");
  return it != object.end() && it->is_string() && it->get_ref<const std::string&>() == type;
}

const json* Field(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<HttpError> Number(const json& body, const char* name, std::optional<double>& out) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return BadRequest(std::string(name) + " must be a number", name);
  const double d = v->get<double>();
  if (!std::isfinite(d)) return BadRequest(std::string(name) + " must be finite", name);
  out = d;
  return std::nullopt;
}

std::optional<HttpError> Integer(const json& body, const char* name, int64_t min, int64_t max,
                                 std::optional<int64_t>& out) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  const auto range = [&] {
    return BadRequest(std::string(name) + " must be an integer in [" + std::to_string(min) +
                          ", " + std::to_string(max) + "]",
                      name);
  };
  if (v->is_number_integer()) {
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(max)) return range();
      out = static_cast<int64_t>(u);
    } else {
      out = v->get<int64_t>();
    }
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::abs(v->get<double>()) < 9e15) {
    out = static_cast<int64_t>(v->get<double>());
  } else {
    return range();
  }
  if (*out < min || *out > max) return range();
  return std::nullopt;
}

std::optional<HttpError> Bool(const json& body, const char* name, std::optional<bool>& out) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return BadRequest(std::string(name) + " must be true or false", name);
  out = v->get<bool>();
  return std::nullopt;
}

std::optional<HttpError> String(const json& body, const char* name,
                                std::optional<std::string>& out) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return BadRequest(std::string(name) + " must be a string", name);
  out = v->get<std::string>();
  return std::nullopt;
}

std::optional<HttpError> RefuseUnknown(const json& body, const std::set<std::string_view>& known) {
  for (const auto& [key, value] : body.items()) {
    if (known.count(key) == 0) {
      return BadRequest("Unrecognized request argument supplied: " + key +
                            " (tokenmill does not support it; remove it)",
                        key);
    }
  }
  return std::nullopt;
}

}  // namespace tokenmill::gateway
