#include "text/jinja/python_ops.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tokenmill::jinja {
namespace {

bool IsNumberLike(const Json& v) { return v.is_number() || v.is_boolean(); }

void AppendHex(std::string& out, const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, digits, value);
  out += buf;
}

void AppendJsonChar(std::string& out, char32_t c, bool ensure_ascii) {
  switch (c) {
    case '"':
      out += "\\\"";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\b':
      out += "\\b";
      return;
    case '\f':
      out += "\\f";
      return;
    default:
      break;
  }
  if (c < 0x20) {
    AppendHex(out, "\\u", c, 4);
  } else if (c < 0x80 || !ensure_ascii) {
    out += EncodeUtf8(std::u32string_view(&c, 1));
  } else if (c < 0x10000) {
    AppendHex(out, "\\u", c, 4);
  } else {  // a UTF-16 surrogate pair, as Python writes it
    const char32_t v = c - 0x10000;
    AppendHex(out, "\\u", 0xD800 + (v >> 10), 4);
    AppendHex(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
  }
}

void AppendJsonString(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (const char32_t c : DecodeUtf8(s)) AppendJsonChar(out, c, ensure_ascii);
  out.push_back('"');
}

void DumpJson(std::string& out, const Json& v, const JsonDumpOptions& o, int depth) {
  const std::string item_sep = o.separators ? o.separators->first : (o.indent ? "," : ", ");
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  auto newline = [&](int level) {
    if (!o.indent) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(*o.indent) * level, ' ');
  };
  switch (v.type()) {
    case Json::value_t::null:
      out += "null";
      return;
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      return;
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += FormatFloat(d);
      return;
    }
    case Json::value_t::string:
      AppendJsonString(out, v.get_ref<const std::string&>(), o.ensure_ascii);
      return;
    case Json::value_t::array: {
      if (v.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      bool first = true;
      for (const Json& item : v) {
        if (!first) out += item_sep;
        first = false;
        newline(depth + 1);
        DumpJson(out, item, o, depth + 1);
      }
      newline(depth);
      out.push_back(']');
      return;
    }
    case Json::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      if (o.sort_keys) std::sort(keys.begin(), keys.end());
      out.push_back('{');
      bool first = true;
      for (const std::string& key : keys) {
        if (!first) out += item_sep;
        first = false;
        newline(depth + 1);
        AppendJsonString(out, key, o.ensure_ascii);
        out += key_sep;
        DumpJson(out, v.at(key), o, depth + 1);
      }
      newline(depth);
      out.push_back('}');
      return;
    }
    default:
      throw TemplateError("cannot serialize binary data to JSON");
  }
}

std::string ReprString(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char32_t c : DecodeUtf8(s)) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<char32_t>(quote)) {
      out.push_back('\\');
      out.push_back(quote);
    } else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad)
      AppendHex(out, "\\x", c, 2);
    else
      out += EncodeUtf8(std::u32string(1, c));
  }
  out.push_back(quote);
  return out;
}

}  // namespace

std::string FormatFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);  // "-d.ddde+XX"
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (const char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    return sign + digits + std::string(int_digits - digits.size(), '0') + ".0";
  }
  return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string PyRepr(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return v.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case Json::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case Json::value_t::number_float:
      return FormatFloat(v.get<double>());
    case Json::value_t::string:
      return ReprString(v.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + PyRepr(v[i]);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        out += (first ? "" : ", ") + ReprString(it.key()) + ": " + PyRepr(it.value());
        first = false;
      }
      return out + "}";
    }
    default:
      return "b''";
  }
}

std::string PyStr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNamespace:
      return "<Namespace " + PyRepr(value.data()) + ">";
    case Value::Kind::kBuiltin:
      return "<built-in function " + value.text() + ">";
    case Value::Kind::kMacro:
      return "<Macro>";
    case Value::Kind::kData:
      break;
  }
  if (value.is_string()) return value.str();
  return PyRepr(value.data());
}

std::string PyJsonDumps(const Json& value, const JsonDumpOptions& options) {
  std::string out;
  DumpJson(out, value, options, 0);
  return out;
}

std::string StrCat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const std::string_view part : parts) out.append(part);
  return out;
}

bool Truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kNamespace:
    case Value::Kind::kBuiltin:
    case Value::Kind::kMacro:
      return true;
    case Value::Kind::kData:
      break;
  }
  const Json& v = value.data();
  switch (v.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return v.get<bool>();
    case Json::value_t::number_integer:
      return v.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return v.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return v.get<double>() != 0.0;
    case Json::value_t::string:
      return !v.get_ref<const std::string&>().empty();
    default:
      return !v.empty();
  }
}

double AsDouble(const Json& number) {
  if (number.is_boolean()) return number.get<bool>() ? 1.0 : 0.0;
  return number.get<double>();
}

bool PyEqual(const Json& a, const Json& b) {
  if (IsNumberLike(a) && IsNumberLike(b)) {
    if (a.is_number_float() || b.is_number_float()) return AsDouble(a) == AsDouble(b);
    return PyCompare(a, b) == 0;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!PyEqual(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      const auto other = b.find(it.key());
      if (other == b.end() || !PyEqual(it.value(), *other)) return false;
    }
    return true;
  }
  return a == b;
}

int PyCompare(const Json& a, const Json& b) {
  if (IsNumberLike(a) && IsNumberLike(b)) {
    if (a.is_number_float() || b.is_number_float()) {
      const double x = AsDouble(a), y = AsDouble(b);
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    // Exact integer comparison across int64 and uint64 (a negative int is below any uint).
    auto negative = [](const Json& v) {
      return v.is_number_integer() && !v.is_number_unsigned() && !v.is_boolean() &&
             v.get<int64_t>() < 0;
    };
    auto magnitude = [](const Json& v) -> uint64_t {
      if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
      if (v.is_number_unsigned()) return v.get<uint64_t>();
      const int64_t i = v.get<int64_t>();
      return i < 0 ? ~static_cast<uint64_t>(i) + 1 : static_cast<uint64_t>(i);
    };
    const bool na = negative(a), nb = negative(b);
    if (na != nb) return na ? -1 : 1;
    const uint64_t x = magnitude(a), y = magnitude(b);
    if (na) return x > y ? -1 : (x < y ? 1 : 0);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!PyEqual(a[i], b[i])) return PyCompare(a[i], b[i]);
    }
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  throw TemplateError("cannot compare " + Value::Of(a).TypeName() + " with " +
                      Value::Of(b).TypeName());
}

namespace {

// The code point at text[i] and how many bytes it takes; a byte that does not begin
// well-formed UTF-8 is one code point of its own.
size_t DecodeAt(std::string_view text, size_t i, char32_t& cp) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const int extra = lead < 0x80           ? 0
                    : (lead >> 5) == 0x6  ? 1
                    : (lead >> 4) == 0xE  ? 2
                    : (lead >> 3) == 0x1E ? 3
                                          : -1;
  bool valid = extra >= 0 && i + static_cast<size_t>(extra) < text.size();
  cp = lead;
  if (valid && extra > 0) {
    cp = lead & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto cont = static_cast<unsigned char>(text[i + k]);
      valid = valid && (cont & 0xC0) == 0x80;
      cp = (cp << 6) | (cont & 0x3F);
    }
  }
  if (!valid) {  // not UTF-8: keep the byte as one code point
    cp = lead;
    return 1;
  }
  return static_cast<size_t>(extra) + 1;
}

}  // namespace

std::u32string DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  char32_t cp = 0;
  for (size_t i = 0; i < text.size();) {
    i += DecodeAt(text, i, cp);
    out.push_back(cp);
  }
  return out;
}

std::vector<ByteSpan> CodepointSpans(std::string_view text) {
  std::vector<ByteSpan> out;
  char32_t cp = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t length = DecodeAt(text, i, cp);
    out.push_back({i, i + length});
    i += length;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

size_t CodepointCount(std::string_view text) { return DecodeUtf8(text).size(); }

bool IsPyWhitespace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace tokenmill::jinja
