#include "text/jinja/operators.h"

#include <cmath>

#include "text/jinja/marked_ops.h"
#include "text/jinja/python_ops.h"

namespace tokenmill::jinja {
namespace {

// Python's string repetition and list growth are unbounded; a template is not allowed to
// exhaust the server's memory with one expression.
constexpr size_t kMaxRepeatedSize = size_t{1} << 24;

[[noreturn]] void Unsupported(std::string_view op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand types for " + std::string(op) + ": '" + a.TypeName() +
                      "' and '" + b.TypeName() + "'");
}

bool IsIntLike(const Value& v) { return v.is_integer() || v.is_bool(); }

int64_t AsInt(const Json& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_number_unsigned()) return static_cast<int64_t>(v.get<uint64_t>());
  return v.get<int64_t>();
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's index normalization: negative counts from the end.
std::optional<size_t> NormalizeIndex(int64_t index, size_t size) {
  if (index < 0) index += static_cast<int64_t>(size);
  if (index < 0 || index >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(index);
}

// Python's slice.indices(): the positions a slice visits.
std::vector<size_t> SliceIndices(size_t size, const Value& start, const Value& stop,
                                 const Value& step) {
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_null()) return std::nullopt;
    if (!IsIntLike(v)) throw TemplateError(std::string("slice ") + what + " must be an integer");
    return AsInt(v.data());
  };
  const int64_t n = static_cast<int64_t>(size);
  const int64_t s = bound(step, "step").value_or(1);
  if (s == 0) throw TemplateError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t if_missing) {
    if (!v) return if_missing;
    int64_t x = *v < 0 ? *v + n : *v;
    if (s > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t begin = clamp(bound(start, "start"), s > 0 ? 0 : n - 1);
  const int64_t end = clamp(bound(stop, "stop"), s > 0 ? n : -1);
  std::vector<size_t> out;
  for (int64_t i = begin; s > 0 ? i < end : i > end; i += s) out.push_back(static_cast<size_t>(i));
  return out;
}

Json Repeat(const Json& sequence, int64_t times) {
  const size_t count = times < 0 ? 0 : static_cast<size_t>(times);
  const size_t unit =
      sequence.is_string() ? sequence.get_ref<const std::string&>().size() : sequence.size();
  if (unit != 0 && count > kMaxRepeatedSize / unit) {
    throw TemplateError("result of repetition is too large");
  }
  if (sequence.is_string()) {
    std::string out;
    for (size_t i = 0; i < count; ++i) out += sequence.get_ref<const std::string&>();
    return out;
  }
  Json out = Json::array();
  for (size_t i = 0; i < count; ++i) {
    for (const Json& item : sequence) out.push_back(item);
  }
  return out;
}

}  // namespace

void RequireDefined(const Value& value) {
  if (value.is_undefined()) throw TemplateError(value.text());
}

Value GetAttribute(const Value& object, const std::string& name) {
  RequireDefined(object);
  if (object.is_dict()) {
    const Json& dict = object.data();
    const auto it = dict.find(name);
    if (it != dict.end()) return object.is_namespace() ? object.Member(name) : object.Child(*it);
    return Value::Undefined(StrCat({"'", object.is_namespace() ? "Namespace" : "dict",
                                    " object' has no attribute '", name, "'"}));
  }
  return Value::Undefined(
      StrCat({"'", object.TypeName(), " object' has no attribute '", name, "'"}));
}

Value GetItem(const Value& object, const Value& key) {
  RequireDefined(object);
  // Python looks an undefined key up like any other (it is hashable) and misses.
  if (!key.is_data()) return Value::Undefined("no item " + PyStr(key) + " in " + object.TypeName());
  if (object.is_list() && IsIntLike(key)) {
    const Json& list = object.data();
    if (const auto i = NormalizeIndex(AsInt(key.data()), list.size()))
      return object.Child(list[*i]);
    return Value::Undefined("list object has no element " + PyRepr(key.data()));
  }
  if (object.is_string() && IsIntLike(key)) {
    const size_t length = CodepointCount(object.str());
    if (const auto i = NormalizeIndex(AsInt(key.data()), length)) return CharsOf(object, {*i});
    return Value::Undefined("str object has no element " + PyRepr(key.data()));
  }
  if (object.is_dict() && key.is_string()) return GetAttribute(object, key.str());
  if (object.is_dict()) {
    return Value::Undefined("'dict object' has no attribute " + PyStr(key));
  }
  return Value::Undefined(
      StrCat({"'", object.TypeName(), " object' has no attribute ", PyStr(key)}));
}

Value GetSlice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  RequireDefined(object);
  if (object.is_list()) {
    const Json& list = object.data();
    Json out = Json::array();
    for (const size_t i : SliceIndices(list.size(), start, stop, step)) out.push_back(list[i]);
    return Value::Of(std::move(out));
  }
  if (object.is_string()) {
    return CharsOf(object, SliceIndices(CodepointCount(object.str()), start, stop, step));
  }
  throw TemplateError("'" + object.TypeName() + "' object is not subscriptable");
}

Value BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    MarkedString out;
    AppendStr(out, a);
    AppendStr(out, b);
    return ValueOf(std::move(out));
  }
  RequireDefined(a);
  RequireDefined(b);
  if (!a.is_data() || !b.is_data()) Unsupported(op, a, b);
  const Json& x = a.data();
  const Json& y = b.data();
  const bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  const bool ints = IsIntLike(a) && IsIntLike(b);
  if (op == "+") {
    if (ints) return Value::Of(AsInt(x) + AsInt(y));
    if (numbers) return Value::Of(AsDouble(x) + AsDouble(y));
    if (x.is_string() && y.is_string()) {
      MarkedString out;
      AppendStr(out, a);
      AppendStr(out, b);
      return ValueOf(std::move(out));
    }
    if (x.is_array() && y.is_array()) {
      Json out = x;
      for (const Json& item : y) out.push_back(item);
      return Value::Of(std::move(out), ContainerMarks(std::vector<Value>{a, b}));
    }
    Unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value::Of(AsInt(x) - AsInt(y));
    if (numbers) return Value::Of(AsDouble(x) - AsDouble(y));
    Unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value::Of(AsInt(x) * AsInt(y));
    if (numbers) return Value::Of(AsDouble(x) * AsDouble(y));
    if ((x.is_string() || x.is_array()) && IsIntLike(b)) {
      return Value::Of(Repeat(x, AsInt(y)), a.marks().Uniform());
    }
    if ((y.is_string() || y.is_array()) && IsIntLike(a)) {
      return Value::Of(Repeat(y, AsInt(x)), b.marks().Uniform());
    }
    Unsupported(op, a, b);
  }
  if (!numbers) Unsupported(op, a, b);
  const bool divisor_zero = ints ? AsInt(y) == 0 : AsDouble(y) == 0.0;
  if (op == "/") {
    if (divisor_zero) throw TemplateError("division by zero");
    return Value::Of(AsDouble(x) / AsDouble(y));
  }
  if (op == "//") {
    if (divisor_zero) throw TemplateError("integer division or modulo by zero");
    if (ints) return Value::Of(FloorDiv(AsInt(x), AsInt(y)));
    return Value::Of(std::floor(AsDouble(x) / AsDouble(y)));
  }
  if (op == "%") {
    if (divisor_zero) throw TemplateError("integer division or modulo by zero");
    if (ints) return Value::Of(AsInt(x) - FloorDiv(AsInt(x), AsInt(y)) * AsInt(y));
    const double m = std::fmod(AsDouble(x), AsDouble(y));
    return Value::Of(m != 0 && ((m < 0) != (AsDouble(y) < 0)) ? m + AsDouble(y) : m);
  }
  if (op == "**") {
    if (ints && AsInt(y) >= 0) {
      int64_t result = 1;
      for (int64_t i = 0; i < AsInt(y); ++i) {
        if (__builtin_mul_overflow(result, AsInt(x), &result)) {
          throw TemplateError("integer result of ** is too large");
        }
      }
      return Value::Of(result);
    }
    return Value::Of(std::pow(AsDouble(x), AsDouble(y)));
  }
  throw TemplateError("unknown operator " + std::string(op));
}

Value Negate(const Value& value, bool minus) {
  RequireDefined(value);
  if (IsIntLike(value)) return Value::Of(minus ? -AsInt(value.data()) : AsInt(value.data()));
  if (value.is_float())
    return Value::Of(minus ? -value.data().get<double>() : value.data().get<double>());
  throw TemplateError(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" +
                      value.TypeName() + "'");
}

bool Contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;  // iterating undefined yields nothing
  RequireDefined(item);
  if (container.is_string()) {
    if (!item.is_string()) {
      throw TemplateError("'in <string>' requires string as left operand, not " + item.TypeName());
    }
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    if (!item.is_data()) return false;
    for (const Json& element : container.data()) {
      if (PyEqual(element, item.data())) return true;
    }
    return false;
  }
  if (container.is_dict()) {
    return item.is_string() && container.data().contains(item.str());
  }
  throw TemplateError("argument of type '" + container.TypeName() + "' is not iterable");
}

bool Compare(std::string_view op, const Value& a, const Value& b) {
  if (op == "in") return Contains(b, a);
  if (op == "not in") return !Contains(b, a);
  if (op == "==" || op == "!=") {
    bool equal;
    if (a.is_undefined() || b.is_undefined()) {
      equal = a.is_undefined() && b.is_undefined();
    } else if (a.is_data() && b.is_data()) {
      equal = PyEqual(a.data(), b.data());
    } else if (a.is_namespace() && b.is_namespace()) {
      equal = &a.namespace_object() == &b.namespace_object();
    } else {
      equal = a.kind() == b.kind() && a.text() == b.text() && a.macro() == b.macro();
    }
    return op == "==" ? equal : !equal;
  }
  RequireDefined(a);
  RequireDefined(b);
  if (!a.is_data() || !b.is_data() || a.is_namespace() || b.is_namespace()) {
    throw TemplateError("'" + std::string(op) + "' not supported between instances of '" +
                        a.TypeName() + "' and '" + b.TypeName() + "'");
  }
  int c;
  try {
    c = PyCompare(a.data(), b.data());
  } catch (const TemplateError&) {
    throw TemplateError("'" + std::string(op) + "' not supported between instances of '" +
                        a.TypeName() + "' and '" + b.TypeName() + "'");
  }
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

std::vector<Value> Iterate(const Value& value) {
  std::vector<Value> out;
  if (value.is_undefined()) return out;
  if (value.is_list()) {
    for (const Json& item : value.data()) out.push_back(value.Child(item));
    return out;
  }
  if (value.is_dict()) {
    // A namespace's members carry marks of their own: its keys stay the client's.
    const Marks key_marks = value.is_namespace() ? Marks::Client() : value.marks();
    for (auto it = value.data().begin(); it != value.data().end(); ++it) {
      out.push_back(Value::Of(it.key(), key_marks));
    }
    return out;
  }
  if (value.is_string()) {
    return CharValues(value);
  }
  throw TemplateError("'" + value.TypeName() + "' object is not iterable");
}

}  // namespace tokenmill::jinja
