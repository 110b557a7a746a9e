// Jinja2's filters, with Hugging Face's `tojson`.
#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include "text/jinja/builtin_support.h"
#include "text/jinja/builtins.h"
#include "text/jinja/marked_ops.h"
#include "text/jinja/operators.h"
#include "text/jinja/python_ops.h"
#include "text/jinja/string_ops.h"

namespace tokenmill::jinja {
namespace {

// ------------------------------------------------------------------ sequences

// `a.b.c` on each item, as map/selectattr/sort's `attribute` arguments do.
Value GetPath(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = numeric && v.is_list() ? GetItem(v, Value::Of(std::stoll(part))) : GetAttribute(v, part);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

size_t Length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return CodepointCount(v.str());
  if (v.is_list() || v.is_dict()) return v.data().size();
  throw TemplateError("object of type '" + v.TypeName() + "' has no len()");
}

// Sort key: strings compare case-insensitively unless asked otherwise.
Json SortKey(const Value& item, bool case_sensitive) {
  if (!item.is_data()) throw TemplateError("cannot sort values of type " + item.TypeName());
  if (!case_sensitive && item.is_string()) return Lower(item.str());
  return item.data();
}

std::vector<Value> Sorted(std::vector<Value> items, bool reverse, bool case_sensitive,
                          const std::optional<std::string>& attribute) {
  std::vector<std::pair<Json, Value>> keyed;
  for (Value& item : items) {
    keyed.emplace_back(SortKey(attribute ? GetPath(item, *attribute) : item, case_sensitive),
                       std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    const int c = PyCompare(a.first, b.first);
    return reverse ? c > 0 : c < 0;
  });
  items.clear();
  for (auto& [key, item] : keyed) items.push_back(std::move(item));
  return items;
}

Value ListOf(const std::vector<Value>& items) {
  Json out = Json::array();
  for (const Value& item : items) out.push_back(ToData(item));
  return Value::Of(std::move(out), ContainerMarks(items));
}

// select/reject/selectattr/rejectattr: args after the subject are [attribute,] test, test args.
Value SelectOrReject(const Value& subject, const CallArgs& args, bool select, bool by_attribute,
                     std::string_view name) {
  size_t next = 0;
  std::optional<std::string> attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateError(std::string(name) + "() needs an attribute");
    attribute = PyStr(args.positional[next++]);
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) test = PyStr(args.positional[next++]);
  if (test && !IsKnownTest(*test)) throw TemplateError("no test named '" + *test + "'");
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next),
                              args.positional.end());
  test_args.keyword = args.keyword;
  std::vector<Value> kept;
  for (const Value& item : Iterate(subject)) {
    const Value probe = attribute ? GetPath(item, *attribute) : item;
    const bool passed = test ? ApplyTest(*test, probe, test_args) : Truthy(probe);
    if (passed == select) kept.push_back(item);
  }
  return ListOf(kept);
}

Value Map(const Value& subject, const CallArgs& args) {
  std::optional<std::string> attribute;
  std::optional<Value> fallback;
  for (const auto& [key, value] : args.keyword) {
    if (key == "attribute")
      attribute = PyStr(value);
    else if (key == "default")
      fallback = value;
  }
  std::vector<Value> out;
  if (attribute) {
    for (const Value& item : Iterate(subject)) {
      Value v = GetPath(item, *attribute);
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return ListOf(out);
  }
  if (args.positional.empty()) throw TemplateError("map() needs a filter name or attribute=");
  const std::string filter = PyStr(args.positional[0]);
  if (!IsKnownFilter(filter)) throw TemplateError("no filter named '" + filter + "'");
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keyword = args.keyword;
  for (const Value& item : Iterate(subject)) out.push_back(ApplyFilter(filter, item, filter_args));
  return ListOf(out);
}

Value Tojson(const Value& subject, const CallArgs& args) {
  const BoundArguments b("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, args);
  if (subject.is_undefined() || !subject.is_data()) {
    throw TemplateError("Object of type " +
                        std::string(subject.is_undefined() ? "Undefined" : subject.TypeName()) +
                        " is not JSON serializable");
  }
  JsonDumpOptions options;
  options.ensure_ascii = b.Flag(0, false);
  if (b.Has(1) && !b.Get(1).is_null()) options.indent = static_cast<int>(b.Int(1, 0));
  if (b.Has(2) && !b.Get(2).is_null()) {
    const Value& seps = b.Get(2);
    if (!seps.is_list() || seps.data().size() != 2 || !seps.data()[0].is_string() ||
        !seps.data()[1].is_string()) {
      throw TemplateError("tojson separators must be a pair of strings");
    }
    options.separators = {seps.data()[0].get<std::string>(), seps.data()[1].get<std::string>()};
  }
  options.sort_keys = b.Flag(3, false);
  return Value::Of(PyJsonDumps(subject.data(), options), subject.marks().Uniform());
}

Value Indent(const Value& subject, const CallArgs& args) {
  const BoundArguments b("indent", {"width", "first", "blank"}, args);
  std::string indention;
  Marks marks = StrMarks(subject).Uniform();
  if (b.Has(0) && b.Get(0).is_string()) {
    indention = b.Get(0).str();
    if (!b.Get(0).marks().all_template()) marks = Marks::Client();
  } else {
    indention = std::string(static_cast<size_t>(std::max<int64_t>(0, b.Int(0, 4))), ' ');
  }
  const std::string s = PyStr(subject) + "\n";
  std::vector<std::string> lines = SplitLines(s);
  std::string out;
  if (b.Flag(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out.append("\n").append(indention);
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out.push_back('\n');
      if (!lines[i].empty()) out.append(indention).append(lines[i]);
    }
  }
  if (b.Flag(1, false)) out = indention + out;
  return Value::Of(out, marks);
}

Value ToInt(const Value& subject, const CallArgs& args) {
  const BoundArguments b("int", {"default", "base"}, args);
  const Value fallback = b.Or(0, 0);
  if (subject.is_bool()) return Value::Of(static_cast<int64_t>(subject.data().get<bool>()));
  if (subject.is_integer()) return subject;
  if (subject.is_float())
    return Value::Of(static_cast<int64_t>(std::trunc(subject.data().get<double>())));
  if (subject.is_string()) {
    const std::string s = Strip(subject.str(), std::nullopt, true, true);
    const int base = static_cast<int>(b.Int(1, 10));
    size_t used = 0;
    try {
      const long long v = std::stoll(s, &used, base);
      if (used == s.size()) return Value::Of(static_cast<int64_t>(v));
    } catch (const std::exception&) {
    }
    try {
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value::Of(static_cast<int64_t>(std::trunc(d)));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value ToFloat(const Value& subject, const CallArgs& args) {
  const BoundArguments b("float", {"default"}, args);
  if (subject.is_number() || subject.is_bool()) return Value::Of(AsDouble(subject.data()));
  if (subject.is_string()) {
    const std::string s = Strip(subject.str(), std::nullopt, true, true);
    size_t used = 0;
    try {
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value::Of(d);
    } catch (const std::exception&) {
    }
  }
  return b.Or(0, 0.0);
}

Value Round(const Value& subject, const CallArgs& args) {
  const BoundArguments b("round", {"precision", "method"}, args);
  const int64_t precision = b.Int(0, 0);
  const std::string method = b.OptionalString(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") {
    throw TemplateError("round() method must be 'common', 'ceil' or 'floor'");
  }
  RequireData(subject, "round");
  if (!subject.is_number() && !subject.is_bool()) {
    throw TemplateError("round() needs a number, not " + subject.TypeName());
  }
  if (method == "common" && !subject.is_float() && precision >= 0) return subject;
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = AsDouble(subject.data()) * scale;
  const double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::nearbyint(x);
  return Value::Of(r / scale);
}

Value DictSort(const Value& subject, const CallArgs& args) {
  const BoundArguments b("dictsort", {"case_sensitive", "by", "reverse"}, args);
  const bool case_sensitive = b.Flag(0, false);
  const std::string by = b.OptionalString(1).value_or("key");
  if (by != "key" && by != "value") throw TemplateError("dictsort: 'by' must be 'key' or 'value'");
  const Json& dict = RequireData(subject, "dictsort");
  if (!dict.is_object()) throw TemplateError("dictsort needs a dict");
  std::vector<Value> pairs;
  for (auto it = dict.begin(); it != dict.end(); ++it) {
    pairs.push_back(Value::Of(Json::array({it.key(), it.value()}),
                              subject.is_namespace() ? Marks::Client() : subject.marks()));
  }
  const std::string attribute = by == "key" ? "0" : "1";
  return ListOf(Sorted(std::move(pairs), b.Flag(2, false), case_sensitive, attribute));
}

Value MinMax(const Value& subject, const CallArgs& args, bool max) {
  const BoundArguments b(max ? "max" : "min", {"case_sensitive", "attribute"}, args);
  std::vector<Value> items = Iterate(subject);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  items = Sorted(std::move(items), max, b.Flag(0, false), b.OptionalString(1));
  return items.front();
}

Value Sum(const Value& subject, const CallArgs& args) {
  const BoundArguments b("sum", {"attribute", "start"}, args);
  const std::optional<std::string> attribute = b.OptionalString(0);
  Value total = b.Or(1, 0);
  for (const Value& item : Iterate(subject)) {
    total = BinaryOp("+", total, attribute ? GetPath(item, *attribute) : item);
  }
  return total;
}

Value Unique(const Value& subject, const CallArgs& args) {
  const BoundArguments b("unique", {"case_sensitive", "attribute"}, args);
  const bool case_sensitive = b.Flag(0, false);
  const std::optional<std::string> attribute = b.OptionalString(1);
  std::vector<Value> kept;
  std::vector<Json> seen;
  for (const Value& item : Iterate(subject)) {
    const Json key = SortKey(attribute ? GetPath(item, *attribute) : item, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Json& s) { return PyEqual(s, key); })) {
      seen.push_back(key);
      kept.push_back(item);
    }
  }
  return ListOf(kept);
}

// ------------------------------------------------------------------ tables

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

const std::unordered_map<std::string_view, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string_view, FilterFn>{
      {"abs", [](const Value& v,
                 const CallArgs&) { return Negate(v, v.is_number() && AsDouble(v.data()) < 0); }},
      {"attr",
       [](const Value& v, const CallArgs& a) {
         const BoundArguments b("attr", {"name"}, a);
         if (!b.Has(0)) throw TemplateError("attr() needs a name");
         // Python getattr: dict keys are not attributes, namespace members are.
         return v.is_namespace()
                    ? GetAttribute(v, PyStr(b.Get(0)))
                    : Value::Undefined(StrCat({"'", v.TypeName(), " object' has no attribute '",
                                               PyStr(b.Get(0)), "'"}));
       }},
      {"capitalize",
       [](const Value& v, const CallArgs&) { return Transformed(v, Capitalize(PyStr(v))); }},
      {"count", [](const Value& v, const CallArgs&) { return Value::Of(Length(v)); }},
      {"default",
       [](const Value& v, const CallArgs& a) {
         const BoundArguments b("default", {"default_value", "boolean"}, a);
         const bool use_default = v.is_undefined() || (b.Flag(1, false) && !Truthy(v));
         return use_default ? b.Or(0, "") : v;
       }},
      {"dictsort", DictSort},
      {"escape",
       [](const Value& v, const CallArgs&) {
         return Value::Of(HtmlEscape(PyStr(v)), StrMarks(v).Uniform());
       }},
      {"first",
       [](const Value& v, const CallArgs&) {
         std::vector<Value> items = Iterate(v);
         return items.empty() ? Value::Undefined("No first item, sequence was empty.")
                              : items.front();
       }},
      {"float", ToFloat},
      {"indent", Indent},
      {"int", ToInt},
      {"items", [](const Value& v, const CallArgs&) { return Items(v); }},
      {"join",
       [](const Value& v, const CallArgs& a) {
         const BoundArguments b("join", {"d", "attribute"}, a);
         const Value separator = b.Has(0) ? b.Get(0) : Value::Of("", Marks::Template());
         const std::optional<std::string> attribute = b.OptionalString(1);
         MarkedString out;
         bool first = true;
         for (const Value& item : Iterate(v)) {
           if (!first) AppendStr(out, separator);
           first = false;
           AppendStr(out, attribute ? GetPath(item, *attribute) : item);
         }
         return ValueOf(std::move(out));
       }},
      {"last",
       [](const Value& v, const CallArgs&) {
         std::vector<Value> items = Iterate(v);
         return items.empty() ? Value::Undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"length", [](const Value& v, const CallArgs&) { return Value::Of(Length(v)); }},
      {"list", [](const Value& v, const CallArgs&) { return ListOf(Iterate(v)); }},
      {"lower", [](const Value& v, const CallArgs&) { return Transformed(v, Lower(PyStr(v))); }},
      {"map", Map},
      {"max", [](const Value& v, const CallArgs& a) { return MinMax(v, a, true); }},
      {"min", [](const Value& v, const CallArgs& a) { return MinMax(v, a, false); }},
      {"reject", [](const Value& v,
                    const CallArgs& a) { return SelectOrReject(v, a, false, false, "reject"); }},
      {"rejectattr",
       [](const Value& v, const CallArgs& a) {
         return SelectOrReject(v, a, false, true, "rejectattr");
       }},
      {"replace",
       [](const Value& v, const CallArgs& a) {
         const BoundArguments b("replace", {"old", "new", "count"}, a);
         if (!b.Has(0) || !b.Has(1)) throw TemplateError("replace() needs old and new");
         return ReplaceMarked(v, PyStr(b.Get(0)), b.Get(1), b.Int(2, -1));
       }},
      {"reverse",
       [](const Value& v, const CallArgs&) {
         if (v.is_string()) {
           std::vector<size_t> reversed(CodepointCount(v.str()));
           for (size_t i = 0; i < reversed.size(); ++i) reversed[i] = reversed.size() - 1 - i;
           return CharsOf(v, reversed);
         }
         std::vector<Value> items = Iterate(v);
         std::reverse(items.begin(), items.end());
         return ListOf(items);
       }},
      {"round", Round},
      {"safe", [](const Value& v, const CallArgs&) { return v; }},
      {"select", [](const Value& v,
                    const CallArgs& a) { return SelectOrReject(v, a, true, false, "select"); }},
      {"selectattr",
       [](const Value& v, const CallArgs& a) {
         return SelectOrReject(v, a, true, true, "selectattr");
       }},
      {"sort",
       [](const Value& v, const CallArgs& a) {
         const BoundArguments b("sort", {"reverse", "case_sensitive", "attribute"}, a);
         return ListOf(Sorted(Iterate(v), b.Flag(0, false), b.Flag(1, false), b.OptionalString(2)));
       }},
      {"string",
       [](const Value& v, const CallArgs&) { return Value::Of(PyStr(v), StrMarks(v)); }},
      {"sum", Sum},
      {"title",
       [](const Value& v, const CallArgs&) { return Transformed(v, JinjaTitle(PyStr(v))); }},
      {"tojson", Tojson},
      {"trim",
       [](const Value& v, const CallArgs& a) {
         const BoundArguments b("trim", {"chars"}, a);
         return StripMarked(v, b.OptionalString(0), true, true);
       }},
      {"unique", Unique},
      {"upper", [](const Value& v, const CallArgs&) { return Transformed(v, Upper(PyStr(v))); }},
      {"wordcount",
       [](const Value& v, const CallArgs&) {
         int64_t words = 0;
         bool in_word = false;
         for (const char c : PyStr(v)) {
           const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (c & 0x80);
           if (w && !in_word) ++words;
           in_word = w;
         }
         return Value::Of(words);
       }},
  };
  return *filters;
}

std::string_view CanonicalFilter(std::string_view name) {
  if (name == "d") return "default";
  if (name == "e") return "escape";
  return name;
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return Filters().contains(CanonicalFilter(name)); }

Value ApplyFilter(std::string_view name, const Value& subject, const CallArgs& args) {
  const auto it = Filters().find(CanonicalFilter(name));
  if (it == Filters().end()) throw TemplateError("unknown filter '" + std::string(name) + "'");
  return it->second(subject, args);
}

}  // namespace tokenmill::jinja
