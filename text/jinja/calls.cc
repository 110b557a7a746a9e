// What templates call: the environment's global functions (range, dict, namespace,
// raise_exception, strftime_now) and the str and dict methods they use.
#include <algorithm>
#include <ctime>

#include "text/jinja/builtin_support.h"
#include "text/jinja/builtins.h"
#include "text/jinja/marked_ops.h"
#include "text/jinja/operators.h"
#include "text/jinja/python_ops.h"
#include "text/jinja/string_ops.h"

namespace tokenmill::jinja {
namespace {

// Range sizes above this are refused, like Jinja's sandbox (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

// `object` is a string. What the methods build keeps its marks (marked_ops.h).
std::optional<Value> StringMethod(const Value& object, std::string_view name, const CallArgs& a) {
  const std::string& s = object.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const BoundArguments b(name, {"chars"}, a);
    return StripMarked(object, b.OptionalString(0), name != "rstrip", name != "lstrip");
  }
  if (name == "split") {
    const BoundArguments b(name, {"sep", "maxsplit"}, a);
    return Value::Of(Split(s, b.OptionalString(0), b.Int(1, -1)), object.marks().Uniform());
  }
  if (name == "splitlines") {
    Json out = Json::array();
    for (const std::string& line : SplitLines(s)) out.push_back(line);
    return Value::Of(std::move(out), object.marks().Uniform());
  }
  if (name == "startswith" || name == "endswith") {
    if (a.positional.size() != 1 || !a.keyword.empty()) {
      throw TemplateError(std::string(name) + "() takes exactly one argument");
    }
    return Value::Of(MatchesAffix(s, a.positional[0], name == "startswith"));
  }
  if (name == "replace") {
    const BoundArguments b(name, {"old", "new", "count"}, a);
    if (!b.Has(0) || !b.Has(1)) throw TemplateError("replace() needs old and new");
    if (!b.Get(0).is_string() || !b.Get(1).is_string())
      throw TemplateError("replace() arguments must be str");
    return ReplaceMarked(object, b.Get(0).str(), b.Get(1), b.Int(2, -1));
  }
  if (name == "upper") return Transformed(object, Upper(s));
  if (name == "lower") return Transformed(object, Lower(s));
  if (name == "title") return Transformed(object, PyTitle(s));
  if (name == "capitalize") return Transformed(object, Capitalize(s));
  if (name == "find" || name == "rfind" || name == "count") {
    const BoundArguments b(name, {"sub"}, a);
    if (!b.Has(0) || !b.Get(0).is_string())
      throw TemplateError(std::string(name) + "() needs a str");
    const std::string& sub = b.Get(0).str();
    if (name == "count") {
      if (sub.empty()) return Value::Of(static_cast<int64_t>(CodepointCount(s) + 1));
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::Of(n);
    }
    const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
    return Value::Of(at == std::string::npos
                         ? int64_t{-1}
                         : static_cast<int64_t>(CodepointCount(s.substr(0, at))));
  }
  if (name == "join") {
    const BoundArguments b(name, {"iterable"}, a);
    if (!b.Has(0)) throw TemplateError("join() needs an iterable");
    MarkedString out;
    bool first = true;
    for (const Value& item : Iterate(b.Get(0))) {
      if (!item.is_string())
        throw TemplateError("join() items must be str, not " + item.TypeName());
      if (!first) AppendStr(out, object);
      AppendStr(out, item);
      first = false;
    }
    return ValueOf(std::move(out));
  }
  auto all_chars = [&](auto predicate) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
      return predicate(static_cast<unsigned char>(c));
    });
  };
  if (name == "isdigit") return Value::Of(all_chars([](int c) { return std::isdigit(c) != 0; }));
  if (name == "isalpha") return Value::Of(all_chars([](int c) { return std::isalpha(c) != 0; }));
  if (name == "isalnum") return Value::Of(all_chars([](int c) { return std::isalnum(c) != 0; }));
  if (name == "isspace") return Value::Of(all_chars([](int c) { return std::isspace(c) != 0; }));
  return std::nullopt;
}

std::optional<Value> DictMethod(const Value& dict, std::string_view name, const CallArgs& a) {
  if (name == "items") return Items(dict);
  if (name == "keys" || name == "values") {
    Json out = Json::array();
    for (auto it = dict.data().begin(); it != dict.data().end(); ++it) {
      out.push_back(name == "keys" ? Json(it.key()) : it.value());
    }
    return Value::Of(std::move(out), dict.is_namespace() ? Marks::Client() : dict.marks());
  }
  if (name == "get") {
    const BoundArguments b("get", {"key", "default"}, a);
    if (!b.Has(0)) throw TemplateError("get() needs a key");
    const Value found = b.Get(0).is_string() ? GetAttribute(dict, b.Get(0).str()) : Value();
    return found.is_undefined() ? b.Or(1, nullptr) : found;
  }
  return std::nullopt;
}

bool IsMutatingMethod(std::string_view name) {
  static constexpr std::string_view kMutating[] = {
      "append",  "extend", "insert",  "pop",        "remove",      "clear",      "sort",
      "reverse", "update", "popitem", "setdefault", "__setitem__", "__delitem__"};
  return std::find(std::begin(kMutating), std::end(kMutating), name) != std::end(kMutating);
}

std::string StrFTimeNow(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  return std::string(buf, n);
}

}  // namespace

bool IsGlobalFunction(std::string_view name) {
  return name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" ||
         name == "strftime_now";
}

Value CallGlobal(std::string_view name, const CallArgs& args) {
  if (name == "raise_exception") {
    const BoundArguments b(name, {"message"}, args);
    throw RaisedError(b.Has(0) ? PyStr(b.Get(0)) : "");
  }
  if (name == "strftime_now") {
    const BoundArguments b(name, {"format"}, args);
    if (!b.Has(0)) throw TemplateError("strftime_now() needs a format");
    return Value::Of(StrFTimeNow(PyStr(b.Get(0))));
  }
  if (name == "range") {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
      throw TemplateError("range() takes 1 to 3 integer arguments");
    }
    std::vector<int64_t> n;
    for (const Value& v : args.positional) {
      if (!v.is_integer() && !v.is_bool()) {
        throw TemplateError("range() arguments must be integers, not " + v.TypeName());
      }
      n.push_back(v.is_bool() ? v.data().get<bool>() : v.data().get<int64_t>());
    }
    const int64_t start = n.size() == 1 ? 0 : n[0];
    const int64_t stop = n.size() == 1 ? n[0] : n[1];
    const int64_t step = n.size() == 3 ? n[2] : 1;
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    const int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                   : (start > stop ? (start - stop - step - 1) / -step : 0);
    if (count > kMaxRange) {
      throw TemplateError(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    Json out = Json::array();
    for (int64_t i = 0; i < count; ++i) out.push_back(start + i * step);
    return Value::Of(std::move(out));
  }
  if (name == "dict" || name == "namespace") {
    Json object = Json::object();
    if (args.positional.size() > 1)
      throw TemplateError(std::string(name) + "() takes at most one mapping");
    // Who wrote the strings: a namespace keeps it per member, a dict for all of them.
    std::vector<Value> parts;
    Marks init_marks = Marks::Template();
    if (!args.positional.empty()) {
      const Value& init = args.positional[0];
      if (!init.is_dict()) throw TemplateError(std::string(name) + "() argument must be a dict");
      object = init.data();
      init_marks = init.is_namespace() ? Marks::Client() : init.marks();
      parts.push_back(init.is_namespace() ? Value::Of(object) : init);
    }
    for (const auto& [key, value] : args.keyword) {
      object[key] = ToData(value);
      parts.push_back(value);
    }
    if (name == "dict") return Value::Of(std::move(object), ContainerMarks(parts));
    if (NestsDeeperThan(object, kMaxValueNesting)) {
      throw TemplateError("a value nests deeper than " + std::to_string(kMaxValueNesting) +
                          " levels");
    }
    const Value ns = Value::Namespace(std::move(object), init_marks);
    for (const auto& [key, value] : args.keyword) ns.SetMember(key, value);
    return ns;
  }
  throw TemplateError("unknown function '" + std::string(name) + "'");
}

std::optional<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args) {
  if (object.is_string()) return StringMethod(object, name, args);
  if (object.is_data() && object.data().is_object()) {
    if (IsMutatingMethod(name)) {
      throw TemplateError("access to attribute '" + std::string(name) +
                          "' of 'dict' object is unsafe.");
    }
    return DictMethod(object, name, args);
  }
  if (object.is_list() && IsMutatingMethod(name)) {
    throw TemplateError("access to attribute '" + std::string(name) +
                        "' of 'list' object is unsafe.");
  }
  return std::nullopt;
}

}  // namespace tokenmill::jinja
