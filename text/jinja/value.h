// The values a Jinja template computes with. Data is nlohmann::ordered_json (Python dicts keep
// insertion order, and so does ordered_json); on top of it Jinja needs `undefined`, mutable
// `namespace()` objects and callables (macros and the environment's global functions).
// Data values are views into a shared immutable tree, so `messages[i]` copies nothing.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>

#include "text/jinja/marks.h"

#include "common/json_nesting.h"

namespace tokenmill::jinja {

using Json = nlohmann::ordered_json;

// 1-based line and column in the template source; line 0 means "unknown".
struct SourcePos {
  int line = 0;
  int column = 0;
};

// A parse or render failure. It stays inside the renderer: Template turns it into a Status.
class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& message, SourcePos pos = {})
      : std::runtime_error(message), pos_(pos) {}
  SourcePos pos() const { return pos_; }
  void set_pos_if_unknown(SourcePos pos) {
    if (pos_.line == 0) pos_ = pos;
  }

 private:
  SourcePos pos_;
};

// Whether `value` nests arrays and objects deeper than `limit` levels. Iterative: it guards
// the recursive code (copies, printing, comparison) against hostile input.
inline bool NestsDeeperThan(const Json& value, int limit) {
  return JsonNestsDeeperThan(value, limit);
}

// How deep template variables may nest (the one bound on client JSON), and values a template
// builds (which may wrap them).
inline constexpr int kMaxVariableNesting = kMaxJsonNesting;
inline constexpr int kMaxValueNesting = 2 * kMaxJsonNesting;
// The longest string a template may build (Python would grow until memory runs out).
inline constexpr size_t kMaxStringBytes = size_t{1} << 26;

// Throws TemplateError when a string of `bytes` would exceed kMaxStringBytes.
void CheckStringSize(size_t bytes);

struct Stmt;  // a macro's definition, owned by the parsed template

class Value {
 public:
  enum class Kind { kUndefined, kData, kNamespace, kBuiltin, kMacro };

  // Undefined; `description` says what was missing, e.g. "'foo' is undefined".
  Value() : Value(Kind::kUndefined) {}
  static Value Undefined(std::string description);
  // Throws TemplateError when `data` nests deeper than kMaxValueNesting. `marks` say who
  // wrote its strings (marks.h); a list or dict keeps only marks.Uniform().
  static Value Of(Json data, Marks marks = Marks::Client());
  // Its members' strings are marked as `marks` (uniform); SetMember marks each anew.
  static Value Namespace(Json object, Marks marks = Marks::Client());
  static Value Builtin(std::string name);
  static Value Macro(const Stmt* definition);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_data() const { return kind_ == Kind::kData; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kBuiltin || kind_ == Kind::kMacro; }

  // Data only (CHECKed). A namespace reads as its object.
  const Json& data() const;
  // A view of `node`, which lies inside this value's data (and has its marks).
  Value Child(const Json& node) const;
  // Who wrote this string, or the strings inside this list or dict.
  const Marks& marks() const { return marks_; }
  // The same value with other marks (for the special-token variables the template owns).
  Value WithMarks(Marks marks) const;

  // Namespaces only: the object that `set ns.x = ...` changes.
  Json& namespace_object() const { return *namespace_; }
  // Namespaces only: `ns.name` with its own marks, and `set ns.name = value`.
  Value Member(const std::string& name) const;
  void SetMember(const std::string& name, const Value& value) const;
  // Undefined: what was missing. Builtin: its name.
  const std::string& text() const { return text_; }
  const Stmt* macro() const { return macro_; }

  // Convenience for data.
  bool is_null() const { return is_data() && data().is_null(); }
  bool is_string() const { return is_data() && data().is_string(); }
  bool is_bool() const { return is_data() && data().is_boolean(); }
  bool is_number() const { return is_data() && data().is_number(); }
  bool is_integer() const { return is_data() && data().is_number_integer(); }
  bool is_float() const { return is_data() && data().is_number_float(); }
  bool is_list() const { return is_data() && data().is_array(); }
  bool is_dict() const { return (is_data() && data().is_object()) || is_namespace(); }
  const std::string& str() const { return data().get_ref<const std::string&>(); }

  // What Jinja calls the type in messages: "str", "int", "list", "dict", "undefined", ...
  std::string TypeName() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_;
  std::shared_ptr<const Json> root_;  // data: the tree `node_` points into
  const Json* node_ = nullptr;
  std::shared_ptr<Json> namespace_;
  // Namespaces: the marks of members set since it was made (the others have marks_).
  std::shared_ptr<std::unordered_map<std::string, Marks>> member_marks_;
  Marks marks_;
  std::string text_;
  const Stmt* macro_ = nullptr;
};

}  // namespace tokenmill::jinja
