// Pieces the builtins (filters, tests, methods, globals) share: Python-style argument binding,
// conversions to data, and dict items.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/builtins.h"
#include "text/jinja/python_ops.h"

namespace tokenmill::jinja {

// Binds positional and keyword arguments to named parameters, as Python does.
class BoundArguments {
 public:
  BoundArguments(std::string_view callee, std::vector<std::string_view> params,
                 const CallArgs& args)
      : values_(params.size()) {
    if (args.positional.size() > params.size()) {
      throw TemplateError(std::string(callee) + "() takes at most " +
                          std::to_string(params.size()) + " arguments (" +
                          std::to_string(args.positional.size()) + " given)");
    }
    for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = args.positional[i];
    for (const auto& [key, value] : args.keyword) {
      const auto it = std::find(params.begin(), params.end(), key);
      if (it == params.end()) {
        throw TemplateError(std::string(callee) + "() got an unexpected keyword argument '" + key +
                            "'");
      }
      const size_t index = static_cast<size_t>(it - params.begin());
      if (values_[index]) {
        throw TemplateError(std::string(callee) + "() got multiple values for argument '" + key +
                            "'");
      }
      values_[index] = value;
    }
  }

  bool Has(size_t i) const { return values_[i].has_value(); }
  const Value& Get(size_t i) const { return *values_[i]; }
  Value Or(size_t i, Json fallback) const {
    return values_[i] ? *values_[i] : Value::Of(std::move(fallback));
  }
  bool Flag(size_t i, bool fallback) const { return values_[i] ? Truthy(*values_[i]) : fallback; }
  int64_t Int(size_t i, int64_t fallback) const {
    if (!values_[i] || values_[i]->is_null()) return fallback;
    if (values_[i]->is_bool()) return values_[i]->data().get<bool>() ? 1 : 0;
    if (!values_[i]->is_integer()) {
      throw TemplateError("expected an integer argument, got " + values_[i]->TypeName());
    }
    return values_[i]->data().get<int64_t>();
  }
  std::optional<std::string> OptionalString(size_t i) const {
    if (!values_[i] || values_[i]->is_null() || values_[i]->is_undefined()) return std::nullopt;
    return PyStr(*values_[i]);
  }

 private:
  std::vector<std::optional<Value>> values_;
};

// The value as data; throws when it is undefined or not data (`what` names the caller).
const Json& RequireData(const Value& v, std::string_view what);
// The value as data to store in a list or dict.
Json ToData(const Value& v);
// A dict's items as [key, value] pairs; undefined gives none.
Value Items(const Value& subject);

}  // namespace tokenmill::jinja
