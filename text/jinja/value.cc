#include "text/jinja/value.h"

#include <utility>
#include <vector>

#include "common/check.h"

namespace tokenmill::jinja {

void CheckStringSize(size_t bytes) {
  if (bytes > kMaxStringBytes) {
    throw TemplateError("a string would exceed " + std::to_string(kMaxStringBytes) + " bytes");
  }
}

Value Value::Undefined(std::string description) {
  Value v(Kind::kUndefined);
  v.text_ = std::move(description);
  return v;
}

Value Value::Of(Json data, Marks marks) {
  if (data.is_structured() && NestsDeeperThan(data, kMaxValueNesting)) {
    throw TemplateError("a value nests deeper than " + std::to_string(kMaxValueNesting) +
                        " levels");
  }
  Value v(Kind::kData);
  v.root_ = std::make_shared<const Json>(std::move(data));
  v.node_ = v.root_.get();
  v.marks_ = v.node_->is_string() ? std::move(marks) : marks.Uniform();
  return v;
}

Value Value::Namespace(Json object, Marks marks) {
  Value v(Kind::kNamespace);
  v.namespace_ = std::make_shared<Json>(std::move(object));
  v.member_marks_ = std::make_shared<std::unordered_map<std::string, Marks>>();
  v.marks_ = marks.Uniform();
  return v;
}

Value Value::WithMarks(Marks marks) const {
  Value v = *this;
  v.marks_ = v.is_string() ? std::move(marks) : marks.Uniform();
  return v;
}

Value Value::Member(const std::string& name) const {
  TM_CHECK(kind_ == Kind::kNamespace);
  const auto marks = member_marks_->find(name);
  return Of(namespace_->at(name), marks == member_marks_->end() ? marks_ : marks->second);
}

void Value::SetMember(const std::string& name, const Value& value) const {
  TM_CHECK(kind_ == Kind::kNamespace);
  (*namespace_)[name] = value.data();
  (*member_marks_)[name] = value.marks();
}

Value Value::Builtin(std::string name) {
  Value v(Kind::kBuiltin);
  v.text_ = std::move(name);
  return v;
}

Value Value::Macro(const Stmt* definition) {
  Value v(Kind::kMacro);
  v.macro_ = definition;
  return v;
}

const Json& Value::data() const {
  if (kind_ == Kind::kNamespace) return *namespace_;
  TM_CHECK(kind_ == Kind::kData) << "data() of a value of type " << TypeName();
  return *node_;
}

Value Value::Child(const Json& node) const {
  if (kind_ == Kind::kNamespace) return Of(node);  // the namespace may change: copy
  TM_CHECK(kind_ == Kind::kData);
  Value v(Kind::kData);
  v.root_ = root_;
  v.node_ = &node;
  v.marks_ = marks_.Uniform();
  return v;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kBuiltin:
      return "builtin_function";
    case Kind::kMacro:
      return "Macro";
    case Kind::kData:
      break;
  }
  switch (node_->type()) {
    case Json::value_t::null:
      return "NoneType";
    case Json::value_t::boolean:
      return "bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "int";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::string:
      return "str";
    case Json::value_t::array:
      return "list";
    case Json::value_t::object:
      return "dict";
    default:
      return "bytes";
  }
}

}  // namespace tokenmill::jinja
