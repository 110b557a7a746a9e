// Jinja2's tests: the names after `is`.
#include <array>
#include <functional>
#include <unordered_map>

#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/python_ops.h"
#include "text/jinja/string_ops.h"

namespace tokenmill::jinja {
namespace {

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

const Value& TestArgument(const CallArgs& a, std::string_view test) {
  if (a.positional.empty())
    throw TemplateError("test '" + std::string(test) + "' needs an argument");
  return a.positional[0];
}

const std::unordered_map<std::string_view, TestFn>& Tests() {
  auto compare = [](const char* op) {
    return [op](const Value& v, const CallArgs& a) { return Compare(op, v, TestArgument(a, op)); };
  };
  static const auto* tests = new std::unordered_map<std::string_view, TestFn>{
      {"boolean", [](const Value& v, const CallArgs&) { return v.is_bool(); }},
      {"callable", [](const Value& v, const CallArgs&) { return v.is_callable(); }},
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"divisibleby",
       [](const Value& v, const CallArgs& a) {
         const Value r = BinaryOp("%", v, TestArgument(a, "divisibleby"));
         return !Truthy(r);
       }},
      {"eq", compare("==")},
      {"escaped", [](const Value&, const CallArgs&) { return false; }},
      {"even",
       [](const Value& v, const CallArgs&) { return !Truthy(BinaryOp("%", v, Value::Of(2))); }},
      {"false",
       [](const Value& v, const CallArgs&) { return v.is_bool() && !v.data().get<bool>(); }},
      {"filter",
       [](const Value& v, const CallArgs&) { return v.is_string() && IsKnownFilter(v.str()); }},
      {"float", [](const Value& v, const CallArgs&) { return v.is_float(); }},
      {"ge", compare(">=")},
      {"gt", compare(">")},
      {"in", [](const Value& v, const CallArgs& a) { return Contains(TestArgument(a, "in"), v); }},
      {"integer", [](const Value& v, const CallArgs&) { return v.is_integer(); }},
      {"iterable",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"le", compare("<=")},
      {"lower",
       [](const Value& v, const CallArgs&) {
         return v.is_string() && Lower(v.str()) == v.str() && Upper(v.str()) != v.str();
       }},
      {"lt", compare("<")},
      {"mapping",
       [](const Value& v, const CallArgs&) { return v.is_data() && v.data().is_object(); }},
      {"ne", compare("!=")},
      {"none", [](const Value& v, const CallArgs&) { return v.is_null(); }},
      {"number", [](const Value& v, const CallArgs&) { return v.is_number() || v.is_bool(); }},
      {"odd",
       [](const Value& v, const CallArgs&) { return Truthy(BinaryOp("%", v, Value::Of(2))); }},
      {"sameas",
       [](const Value& v, const CallArgs& a) {
         const Value& other = TestArgument(a, "sameas");
         if (v.is_namespace() && other.is_namespace())
           return &v.namespace_object() == &other.namespace_object();
         if (!v.is_data() || !other.is_data()) return false;
         const Json& x = v.data();
         const Json& y = other.data();
         if (x.is_null() || x.is_boolean()) return x.type() == y.type() && x == y;
         return &x == &y;
       }},
      {"sequence",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"test",
       [](const Value& v, const CallArgs&) { return v.is_string() && IsKnownTest(v.str()); }},
      {"true", [](const Value& v, const CallArgs&) { return v.is_bool() && v.data().get<bool>(); }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"upper",
       [](const Value& v, const CallArgs&) {
         return v.is_string() && Upper(v.str()) == v.str() && Lower(v.str()) != v.str();
       }},
  };
  return *tests;
}

std::string_view CanonicalTest(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kAliases = {{
      {"==", "eq"},
      {"equalto", "eq"},
      {"!=", "ne"},
      {"<", "lt"},
      {"lessthan", "lt"},
      {"<=", "le"},
      {">", "gt"},
      {"greaterthan", "gt"},
      {">=", "ge"},
  }};
  for (const auto& [alias, canonical] : kAliases) {
    if (name == alias) return canonical;
  }
  return name;
}

}  // namespace

bool IsKnownTest(std::string_view name) { return Tests().contains(CanonicalTest(name)); }

bool ApplyTest(std::string_view name, const Value& subject, const CallArgs& args) {
  const auto it = Tests().find(CanonicalTest(name));
  if (it == Tests().end()) throw TemplateError("unknown test '" + std::string(name) + "'");
  return it->second(subject, args);
}

}  // namespace tokenmill::jinja
