// The filters, tests, global functions and str/dict methods of Jinja2 (3.1) that chat templates
// use, with Hugging Face's `tojson` (no HTML escaping, keeps non-ASCII, accepts indent,
// separators, sort_keys, ensure_ascii) and its globals raise_exception and strftime_now.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tokenmill::jinja {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// raise_exception(message) from a template: the author's message for the user.
class RaisedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
bool IsGlobalFunction(std::string_view name);

Value ApplyFilter(std::string_view name, const Value& subject, const CallArgs& args);
bool ApplyTest(std::string_view name, const Value& subject, const CallArgs& args);
Value CallGlobal(std::string_view name, const CallArgs& args);
// object.name(args) for str, dict and list methods; nullopt when there is no such method.
std::optional<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args);

}  // namespace tokenmill::jinja
