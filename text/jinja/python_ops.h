// Python semantics that Jinja inherits and chat templates depend on byte for byte: str() and
// repr() of values, json.dumps (as Hugging Face's `tojson`), truthiness, equality and ordering,
// and strings as sequences of code points. Failures throw TemplateError (see value.h).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tokenmill::jinja {

// Python's repr(float): shortest round trip, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string FormatFloat(double value);

// Python's str(x) and repr(x) for data (None, True, 1.5, 'text', [1, 'a'], {'k': 2}).
std::string PyStr(const Value& value);
std::string PyRepr(const Json& value);

// json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=...).
struct JsonDumpOptions {
  std::optional<int> indent;                                      // none: one line
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string PyJsonDumps(const Json& value, const JsonDumpOptions& options);

// Joins the parts (GCC 12 warns wrongly on `"literal" + std::string(...)` at -O3).
std::string StrCat(std::initializer_list<std::string_view> parts);

bool Truthy(const Value& value);
// Python ==: numbers compare by value across int/float/bool, containers deeply.
bool PyEqual(const Json& a, const Json& b);
// Python <, as -1/0/1; throws for types Python cannot order.
int PyCompare(const Json& a, const Json& b);
double AsDouble(const Json& number);

// Strings as code points (UTF-8 in, UTF-8 out). Invalid bytes count as one code point each.
std::u32string DecodeUtf8(std::string_view text);
std::string EncodeUtf8(std::u32string_view text);
size_t CodepointCount(std::string_view text);
// The bytes of each code point of `text`, as DecodeUtf8 reads them.
std::vector<ByteSpan> CodepointSpans(std::string_view text);

// Python's whitespace for str.strip() and str.split() without arguments.
bool IsPyWhitespace(char32_t c);

}  // namespace tokenmill::jinja
