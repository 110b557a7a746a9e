#include "model/chat/jinja/builtins.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <functional>
#include <unordered_map>

#include "model/chat/jinja/operators.h"
#include "model/chat/jinja/python_ops.h"

namespace tokenmill::jinja {
namespace {

// Range sizes above this are refused, like Jinja's sandbox (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

// Binds positional and keyword arguments to named parameters, as Python does.
class Bound {
 public:
  Bound(std::string_view callee, std::vector<std::string_view> params, const CallArgs& args)
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

// ------------------------------------------------------------------ strings

std::string AsciiMap(std::string s, int (*f)(int)) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x80)
      c = static_cast<char>(f(static_cast<unsigned char>(c)));
  }
  return s;
}
std::string Upper(const std::string& s) {
  return AsciiMap(s, [](int c) { return std::toupper(c); });
}
std::string Lower(const std::string& s) {
  return AsciiMap(s, [](int c) { return std::tolower(c); });
}

std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out = Upper(out.substr(0, 1)) + out.substr(1);
  return out;
}

// Python's str.strip/lstrip/rstrip: whitespace, or any of `chars`.
std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::u32string text = DecodeUtf8(s);
  const std::u32string set = chars ? DecodeUtf8(*chars) : U"";
  auto strip = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : IsPyWhitespace(c);
  };
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end && strip(text[begin])) ++begin;
  if (right)
    while (end > begin && strip(text[end - 1])) --end;
  return EncodeUtf8(std::u32string_view(text).substr(begin, end - begin));
}

Json Split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  Json out = Json::array();
  if (!sep) {  // runs of whitespace, no empty strings
    const std::u32string text = DecodeUtf8(s);
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && IsPyWhitespace(text[i])) ++i;
      if (i == text.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t end = text.size();
        while (end > i && IsPyWhitespace(text[end - 1])) --end;
        out.push_back(EncodeUtf8(std::u32string_view(text).substr(i, end - i)));
        break;
      }
      size_t j = i;
      while (j < text.size() && !IsPyWhitespace(text[j])) ++j;
      out.push_back(EncodeUtf8(std::u32string_view(text).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  if (sep->empty()) throw TemplateError("empty separator");
  size_t start = 0;
  while (true) {
    const size_t found = s.find(*sep, start);
    if (found == std::string::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, found - start));
    start = found + sep->size();
  }
}

std::string Replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts `with` around every character
    const std::u32string text = DecodeUtf8(s);
    for (size_t i = 0; i <= text.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < text.size()) out += EncodeUtf8(std::u32string(1, text[i]));
    }
    return out;
  }
  while (count < 0 || done < count) {
    const size_t found = s.find(old, start);
    if (found == std::string::npos) break;
    out += s.substr(start, found - start) + with;
    start = found + old.size();
    ++done;
  }
  return out + s.substr(start);
}

bool MatchesAffix(const std::string& s, const Value& affix, bool prefix) {
  std::vector<std::string> options;
  if (affix.is_list()) {
    for (const Json& item : affix.data()) {
      if (!item.is_string()) throw TemplateError("startswith/endswith: tuple items must be str");
      options.push_back(item.get<std::string>());
    }
  } else if (affix.is_string()) {
    options.push_back(affix.str());
  } else {
    throw TemplateError("startswith/endswith first arg must be str or a tuple of str, not " +
                        affix.TypeName());
  }
  for (const std::string& o : options) {
    if (prefix ? s.starts_with(o) : s.ends_with(o)) return true;
  }
  return false;
}

// Python's str.title(): a cased letter after an uncased one is upper case.
std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool previous_cased = false;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (alpha) c = static_cast<char>(previous_cased ? std::tolower(c) : std::toupper(c));
    previous_cased = alpha;
  }
  return out;
}

// Jinja's `title` filter: words begin after '-', whitespace and opening brackets.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (const char c : s) {
    const bool boundary = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                          std::isspace(static_cast<unsigned char>(c));
    if (boundary) {
      out.push_back(c);
      word_start = true;
    } else {
      out.push_back(static_cast<char>(word_start ? std::toupper(static_cast<unsigned char>(c))
                                                 : std::tolower(static_cast<unsigned char>(c))));
      word_start = false;
    }
  }
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

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
  return Value::Of(std::move(out));
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
  const Bound b("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, args);
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
  return Value::Of(PyJsonDumps(subject.data(), options));
}

Value Indent(const Value& subject, const CallArgs& args) {
  const Bound b("indent", {"width", "first", "blank"}, args);
  std::string indention;
  if (b.Has(0) && b.Get(0).is_string()) {
    indention = b.Get(0).str();
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
  return Value::Of(out);
}

Value ToInt(const Value& subject, const CallArgs& args) {
  const Bound b("int", {"default", "base"}, args);
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
  const Bound b("float", {"default"}, args);
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
  const Bound b("round", {"precision", "method"}, args);
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
  const Bound b("dictsort", {"case_sensitive", "by", "reverse"}, args);
  const bool case_sensitive = b.Flag(0, false);
  const std::string by = b.OptionalString(1).value_or("key");
  if (by != "key" && by != "value") throw TemplateError("dictsort: 'by' must be 'key' or 'value'");
  const Json& dict = RequireData(subject, "dictsort");
  if (!dict.is_object()) throw TemplateError("dictsort needs a dict");
  std::vector<Value> pairs;
  for (auto it = dict.begin(); it != dict.end(); ++it) {
    pairs.push_back(Value::Of(Json::array({it.key(), it.value()})));
  }
  const std::string attribute = by == "key" ? "0" : "1";
  return ListOf(Sorted(std::move(pairs), b.Flag(2, false), case_sensitive, attribute));
}

Value MinMax(const Value& subject, const CallArgs& args, bool max) {
  const Bound b(max ? "max" : "min", {"case_sensitive", "attribute"}, args);
  std::vector<Value> items = Iterate(subject);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  items = Sorted(std::move(items), max, b.Flag(0, false), b.OptionalString(1));
  return items.front();
}

Value Sum(const Value& subject, const CallArgs& args) {
  const Bound b("sum", {"attribute", "start"}, args);
  const std::optional<std::string> attribute = b.OptionalString(0);
  Value total = b.Or(1, 0);
  for (const Value& item : Iterate(subject)) {
    total = BinaryOp("+", total, attribute ? GetPath(item, *attribute) : item);
  }
  return total;
}

Value Unique(const Value& subject, const CallArgs& args) {
  const Bound b("unique", {"case_sensitive", "attribute"}, args);
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

Value Items(const Value& subject) {
  if (subject.is_undefined()) return Value::Of(Json::array());
  if (!subject.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  Json out = Json::array();
  for (auto it = subject.data().begin(); it != subject.data().end(); ++it) {
    out.push_back(Json::array({it.key(), it.value()}));
  }
  return Value::Of(std::move(out));
}

// ------------------------------------------------------------------ tables

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

const std::unordered_map<std::string_view, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string_view, FilterFn>{
      {"abs", [](const Value& v,
                 const CallArgs&) { return Negate(v, v.is_number() && AsDouble(v.data()) < 0); }},
      {"attr",
       [](const Value& v, const CallArgs& a) {
         const Bound b("attr", {"name"}, a);
         if (!b.Has(0)) throw TemplateError("attr() needs a name");
         // Python getattr: dict keys are not attributes, namespace members are.
         return v.is_namespace()
                    ? GetAttribute(v, PyStr(b.Get(0)))
                    : Value::Undefined("'" + v.TypeName() + " object' has no attribute '" +
                                       PyStr(b.Get(0)) + "'");
       }},
      {"capitalize",
       [](const Value& v, const CallArgs&) { return Value::Of(Capitalize(PyStr(v))); }},
      {"count", [](const Value& v, const CallArgs&) { return Value::Of(Length(v)); }},
      {"default",
       [](const Value& v, const CallArgs& a) {
         const Bound b("default", {"default_value", "boolean"}, a);
         const bool use_default = v.is_undefined() || (b.Flag(1, false) && !Truthy(v));
         return use_default ? b.Or(0, "") : v;
       }},
      {"dictsort", DictSort},
      {"escape", [](const Value& v, const CallArgs&) { return Value::Of(HtmlEscape(PyStr(v))); }},
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
         const Bound b("join", {"d", "attribute"}, a);
         const std::string separator = b.Has(0) ? PyStr(b.Get(0)) : "";
         const std::optional<std::string> attribute = b.OptionalString(1);
         std::string out;
         bool first = true;
         for (const Value& item : Iterate(v)) {
           if (!first) out += separator;
           first = false;
           out += PyStr(attribute ? GetPath(item, *attribute) : item);
         }
         return Value::Of(out);
       }},
      {"last",
       [](const Value& v, const CallArgs&) {
         std::vector<Value> items = Iterate(v);
         return items.empty() ? Value::Undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"length", [](const Value& v, const CallArgs&) { return Value::Of(Length(v)); }},
      {"list", [](const Value& v, const CallArgs&) { return ListOf(Iterate(v)); }},
      {"lower", [](const Value& v, const CallArgs&) { return Value::Of(Lower(PyStr(v))); }},
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
         const Bound b("replace", {"old", "new", "count"}, a);
         if (!b.Has(0) || !b.Has(1)) throw TemplateError("replace() needs old and new");
         return Value::Of(Replace(PyStr(v), PyStr(b.Get(0)), PyStr(b.Get(1)), b.Int(2, -1)));
       }},
      {"reverse",
       [](const Value& v, const CallArgs&) {
         if (v.is_string()) {
           std::u32string s = DecodeUtf8(v.str());
           std::reverse(s.begin(), s.end());
           return Value::Of(EncodeUtf8(s));
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
         const Bound b("sort", {"reverse", "case_sensitive", "attribute"}, a);
         return ListOf(Sorted(Iterate(v), b.Flag(0, false), b.Flag(1, false), b.OptionalString(2)));
       }},
      {"string", [](const Value& v, const CallArgs&) { return Value::Of(PyStr(v)); }},
      {"sum", Sum},
      {"title", [](const Value& v, const CallArgs&) { return Value::Of(JinjaTitle(PyStr(v))); }},
      {"tojson", Tojson},
      {"trim",
       [](const Value& v, const CallArgs& a) {
         const Bound b("trim", {"chars"}, a);
         return Value::Of(Strip(PyStr(v), b.OptionalString(0), true, true));
       }},
      {"unique", Unique},
      {"upper", [](const Value& v, const CallArgs&) { return Value::Of(Upper(PyStr(v))); }},
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

std::optional<Value> StringMethod(const std::string& s, std::string_view name, const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Bound b(name, {"chars"}, a);
    return Value::Of(Strip(s, b.OptionalString(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    const Bound b(name, {"sep", "maxsplit"}, a);
    return Value::Of(Split(s, b.OptionalString(0), b.Int(1, -1)));
  }
  if (name == "splitlines") {
    Json out = Json::array();
    for (const std::string& line : SplitLines(s)) out.push_back(line);
    return Value::Of(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    if (a.positional.size() != 1 || !a.keyword.empty()) {
      throw TemplateError(std::string(name) + "() takes exactly one argument");
    }
    return Value::Of(MatchesAffix(s, a.positional[0], name == "startswith"));
  }
  if (name == "replace") {
    const Bound b(name, {"old", "new", "count"}, a);
    if (!b.Has(0) || !b.Has(1)) throw TemplateError("replace() needs old and new");
    if (!b.Get(0).is_string() || !b.Get(1).is_string())
      throw TemplateError("replace() arguments must be str");
    return Value::Of(Replace(s, b.Get(0).str(), b.Get(1).str(), b.Int(2, -1)));
  }
  if (name == "upper") return Value::Of(Upper(s));
  if (name == "lower") return Value::Of(Lower(s));
  if (name == "title") return Value::Of(PyTitle(s));
  if (name == "capitalize") return Value::Of(Capitalize(s));
  if (name == "find" || name == "rfind" || name == "count") {
    const Bound b(name, {"sub"}, a);
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
    const Bound b(name, {"iterable"}, a);
    if (!b.Has(0)) throw TemplateError("join() needs an iterable");
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(b.Get(0))) {
      if (!item.is_string())
        throw TemplateError("join() items must be str, not " + item.TypeName());
      out += (first ? "" : s) + item.str();
      first = false;
    }
    return Value::Of(out);
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
    return Value::Of(std::move(out));
  }
  if (name == "get") {
    const Bound b("get", {"key", "default"}, a);
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

bool IsKnownFilter(std::string_view name) { return Filters().contains(CanonicalFilter(name)); }
bool IsKnownTest(std::string_view name) { return Tests().contains(CanonicalTest(name)); }

bool IsGlobalFunction(std::string_view name) {
  return name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" ||
         name == "strftime_now";
}

Value ApplyFilter(std::string_view name, const Value& subject, const CallArgs& args) {
  const auto it = Filters().find(CanonicalFilter(name));
  if (it == Filters().end()) throw TemplateError("unknown filter '" + std::string(name) + "'");
  return it->second(subject, args);
}

bool ApplyTest(std::string_view name, const Value& subject, const CallArgs& args) {
  const auto it = Tests().find(CanonicalTest(name));
  if (it == Tests().end()) throw TemplateError("unknown test '" + std::string(name) + "'");
  return it->second(subject, args);
}

Value CallGlobal(std::string_view name, const CallArgs& args) {
  if (name == "raise_exception") {
    const Bound b(name, {"message"}, args);
    throw RaisedError(b.Has(0) ? PyStr(b.Get(0)) : "");
  }
  if (name == "strftime_now") {
    const Bound b(name, {"format"}, args);
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
    if (!args.positional.empty()) {
      const Value& init = args.positional[0];
      if (!init.is_dict()) throw TemplateError(std::string(name) + "() argument must be a dict");
      object = init.data();
    }
    for (const auto& [key, value] : args.keyword) object[key] = ToData(value);
    if (name == "dict") return Value::Of(std::move(object));
    if (NestsDeeperThan(object, kMaxValueNesting)) {
      throw TemplateError("a value nests deeper than " + std::to_string(kMaxValueNesting) +
                          " levels");
    }
    return Value::Namespace(std::move(object));
  }
  throw TemplateError("unknown function '" + std::string(name) + "'");
}

std::optional<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args) {
  if (object.is_string()) return StringMethod(object.str(), name, args);
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
