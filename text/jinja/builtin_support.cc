#include "text/jinja/builtin_support.h"

#include "text/jinja/operators.h"

namespace tokenmill::jinja {

const Json& RequireData(const Value& v, std::string_view what) {
  RequireDefined(v);
  if (!v.is_data() && !v.is_namespace()) {
    throw TemplateError(std::string(what) + ": unsupported value of type " + v.TypeName());
  }
  return v.data();
}

Json ToData(const Value& v) {
  RequireDefined(v);
  if (!v.is_data()) throw TemplateError("a " + v.TypeName() + " cannot be stored in a list");
  return v.data();
}

Value Items(const Value& subject) {
  if (subject.is_undefined()) return Value::Of(Json::array());
  if (!subject.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  Json out = Json::array();
  for (auto it = subject.data().begin(); it != subject.data().end(); ++it) {
    out.push_back(Json::array({it.key(), it.value()}));
  }
  // A namespace's members carry marks of their own (value.h): its items are the client's.
  return Value::Of(std::move(out), subject.is_namespace() ? Marks::Client() : subject.marks());
}

}  // namespace tokenmill::jinja
