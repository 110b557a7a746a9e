#include "text/jinja/renderer.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/jinja/builtins.h"
#include "text/jinja/marked_ops.h"
#include "text/jinja/operators.h"
#include "text/jinja/python_ops.h"

namespace tokenmill::jinja {
namespace {

// Deep enough for recursive macros over nested JSON schemas, shallow enough for the stack.
constexpr int kMaxCallDepth = 100;
// A template may not produce more than this (a guard against runaway loops).
constexpr size_t kMaxOutputBytes = size_t{64} << 20;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Json& variables, const Markup& markup)
      : variables_(Value::Of(variables)), markup_(markup) {
    scopes_.emplace_back();
  }

  MarkedString Render(const Body& body) {
    MarkedString out;
    out_ = &out;
    Exec(body);
    return out;
  }

 private:
  struct Scope {
    std::unordered_map<std::string, Value> vars;
    bool is_macro_call = false;  // names below it (the caller's) are out of sight
  };

  // Pushes a scope for a loop iteration or a macro call; pops it however the body ends.
  class ScopeGuard {
   public:
    ScopeGuard(Renderer& renderer, Scope scope) : renderer_(renderer) {
      if (scope.is_macro_call && renderer.call_depth_ >= kMaxCallDepth) {
        throw TemplateError("macro calls nested deeper than " + std::to_string(kMaxCallDepth));
      }
      renderer.call_depth_ += scope.is_macro_call ? 1 : 0;
      renderer.scopes_.push_back(std::move(scope));
    }
    ~ScopeGuard() {
      renderer_.call_depth_ -= renderer_.scopes_.back().is_macro_call ? 1 : 0;
      renderer_.scopes_.pop_back();
    }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;

   private:
    Renderer& renderer_;
  };

  // ------------------------------------------------------------------ statements
  Flow Exec(const Body& body) {
    for (const StmtPtr& stmt : body) {
      const Flow flow = ExecOne(*stmt);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow ExecOne(const Stmt& s) {
    try {
      switch (s.kind) {
        case Stmt::Kind::kText:
          Write(Value::Of(s.text, Marks::Template()));
          return Flow::kNormal;
        case Stmt::Kind::kOutput:
          Write(Eval(*s.expr));
          return Flow::kNormal;
        case Stmt::Kind::kIf:
          for (const auto& [condition, body] : s.branches) {
            if (!condition || Truthy(Eval(*condition))) return Exec(body);
          }
          return Flow::kNormal;
        case Stmt::Kind::kFor:
          ExecFor(s);
          return Flow::kNormal;
        case Stmt::Kind::kSet:
          ExecSet(s);
          return Flow::kNormal;
        case Stmt::Kind::kSetBlock: {
          Value captured = ValueOf(Capture(s.body));
          if (s.filter) captured = ApplyFilterChain(*s.filter, captured);
          scopes_.back().vars[s.targets[0]] = captured;
          return Flow::kNormal;
        }
        case Stmt::Kind::kMacro:
          scopes_.back().vars[s.name] = Value::Macro(&s);
          return Flow::kNormal;
        case Stmt::Kind::kFilter:
          Write(ApplyFilterChain(*s.filter, ValueOf(Capture(s.body))));
          return Flow::kNormal;
        case Stmt::Kind::kBreak:
          return Flow::kBreak;
        case Stmt::Kind::kContinue:
          return Flow::kContinue;
        case Stmt::Kind::kScope:
          return Exec(s.body);
      }
    } catch (TemplateError& e) {
      e.set_pos_if_unknown(s.pos);
      throw;
    }
    return Flow::kNormal;
  }

  // Prints PyStr(value) with its marks.
  void Write(const Value& value) {
    if (value.is_string()) {  // no copy: the common case
      CheckOutputSize(value.str().size());
      out_->Append(value.str(), value.marks());
      return;
    }
    const std::string text = PyStr(value);
    CheckOutputSize(text.size());
    out_->Append(text, StrMarks(value));
  }

  void CheckOutputSize(size_t more) const {
    if (out_->size() + more > kMaxOutputBytes) {
      throw TemplateError("the template's output exceeds " + std::to_string(kMaxOutputBytes) +
                          " bytes");
    }
  }

  MarkedString Capture(const Body& body) {
    MarkedString captured;
    MarkedString* saved = std::exchange(out_, &captured);
    try {
      Exec(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return captured;
  }

  void Assign(Scope& scope, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = value;
      return;
    }
    const std::vector<Value> items = Iterate(value);
    if (items.size() != targets.size()) {
      throw TemplateError("cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(targets.size()) + " variables");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
  }

  void ExecSet(const Stmt& s) {
    const Value value = Eval(*s.expr);
    if (s.attribute.empty()) {
      Assign(scopes_.back(), s.targets, value);
      return;
    }
    const Value target = Lookup(s.targets[0]);
    if (!target.is_namespace()) {
      throw TemplateError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    }
    RequireDefined(value);
    if (!value.is_data())
      throw TemplateError("a " + value.TypeName() + " cannot be stored in a namespace");
    if (NestsDeeperThan(value.data(), kMaxValueNesting - 1)) {
      throw TemplateError("a value nests deeper than " + std::to_string(kMaxValueNesting) +
                          " levels");
    }
    target.SetMember(s.attribute, value);
  }

  void ExecFor(const Stmt& s) {
    std::vector<Value> items = Iterate(Eval(*s.expr));
    if (s.condition) {  // `for x in xs if cond`: filtered before loop.* is computed
      std::vector<Value> kept;
      for (const Value& item : items) {
        const ScopeGuard guard(*this, Scope{});
        Assign(scopes_.back(), s.targets, item);
        if (Truthy(Eval(*s.condition))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Exec(s.else_body);
      return;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      Json loop = {{"index", i + 1},
                   {"index0", i},
                   {"revindex", length - i},
                   {"revindex0", length - i - 1},
                   {"first", i == 0},
                   {"last", i == length - 1},
                   {"length", length},
                   {"depth", 1},
                   {"depth0", 0}};
      if (i > 0 && items[i - 1].is_data()) loop["previtem"] = items[i - 1].data();
      if (i + 1 < length && items[i + 1].is_data()) loop["nextitem"] = items[i + 1].data();
      const ScopeGuard guard(*this, Scope{});
      scopes_.back().vars["loop"] = Value::Of(std::move(loop));
      Assign(scopes_.back(), s.targets, items[i]);
      if (Exec(s.body) == Flow::kBreak) break;
    }
  }

  // ------------------------------------------------------------------ expressions
  Value Lookup(const std::string& name) const {
    // Innermost first; a macro call sees its own scopes, then the template's top level.
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      const auto it = scope->vars.find(name);
      if (it != scope->vars.end()) return it->second;
      if (scope->is_macro_call) {
        const auto top = scopes_.front().vars.find(name);
        if (top != scopes_.front().vars.end()) return top->second;
        break;
      }
    }
    const Json& vars = variables_.data();
    if (const auto it = vars.find(name); it != vars.end()) {
      const bool owned = std::find(markup_.variables.begin(), markup_.variables.end(), name) !=
                         markup_.variables.end();
      return owned ? variables_.Child(*it).WithMarks(Marks::Template()) : variables_.Child(*it);
    }
    if (IsGlobalFunction(name)) return Value::Builtin(name);
    return Value::Undefined("'" + name + "' is undefined");
  }

  CallArgs EvalArgs(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
    for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, Eval(*value));
    return args;
  }

  // A filter node whose innermost subject is null gets `subject` there (filter blocks).
  Value ApplyFilterChain(const Expr& filter, const Value& subject) {
    const Value inner = filter.args[0] ? ApplyFilterChain(*filter.args[0], subject) : subject;
    return ApplyFilter(filter.name, inner, EvalArgs(filter, 1));
  }

  Value Eval(const Expr& e) {
    try {
      return EvalUnchecked(e);
    } catch (TemplateError& error) {
      error.set_pos_if_unknown(e.pos);
      throw;
    }
  }

  Value EvalUnchecked(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return Value::Of(e.literal, Marks::Template());
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        Json list = Json::array();
        std::vector<Value> items;
        for (const ExprPtr& item : e.args) {
          items.push_back(Eval(*item));
          list.push_back(DataOf(items.back()));
        }
        return Value::Of(std::move(list), ContainerMarks(items));
      }
      case Expr::Kind::kDict: {
        Json dict = Json::object();
        std::vector<Value> items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = Eval(*e.args[i]);
          if (!key.is_string())
            throw TemplateError("dict keys must be strings, not " + key.TypeName());
          items.push_back(key);
          items.push_back(Eval(*e.args[i + 1]));
          dict[key.str()] = DataOf(items.back());
        }
        return Value::Of(std::move(dict), ContainerMarks(items));
      }
      case Expr::Kind::kAttribute:
        return MarkupWord(GetAttribute(Eval(*e.args[0]), e.name));
      case Expr::Kind::kItem:
        return MarkupWord(GetItem(Eval(*e.args[0]), Eval(*e.args[1])));
      case Expr::Kind::kSlice: {
        auto part = [&](size_t i) { return e.args[i] ? Eval(*e.args[i]) : Value(); };
        return GetSlice(Eval(*e.args[0]), part(1), part(2), part(3));
      }
      case Expr::Kind::kCall:
        return EvalCall(e);
      case Expr::Kind::kFilter:
        return ApplyFilter(e.name, Eval(*e.args[0]), EvalArgs(e, 1));
      case Expr::Kind::kTest: {
        // `x is defined` must not fail on an undefined x; the other tests see it as is.
        const bool result = ApplyTest(e.name, Eval(*e.args[0]), EvalArgs(e, 1));
        return Value::Of(result != e.negated);
      }
      case Expr::Kind::kUnary:
        if (e.name == "not") return Value::Of(!Truthy(Eval(*e.args[0])));
        return Negate(Eval(*e.args[0]), e.name == "-");
      case Expr::Kind::kBinary: {
        if (e.name == "and" || e.name == "or") {  // Python: returns an operand
          Value left = Eval(*e.args[0]);
          if (Truthy(left) == (e.name == "or")) return left;
          return Eval(*e.args[1]);
        }
        return BinaryOp(e.name, Eval(*e.args[0]), Eval(*e.args[1]));
      }
      case Expr::Kind::kCompare: {
        Value left = Eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = Eval(*e.args[i + 1]);
          if (!Compare(e.ops[i], left, right)) return Value::Of(false);
          left = std::move(right);
        }
        return Value::Of(true);
      }
      case Expr::Kind::kCondition:
        if (Truthy(Eval(*e.args[1]))) return Eval(*e.args[0]);
        if (e.args[2]) return Eval(*e.args[2]);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined.");
    }
    throw TemplateError("unknown expression");
  }

  // A word the caller counts as markup (Markup::words), read out of the data: the template's.
  Value MarkupWord(Value v) const {
    if (!v.is_string() || !v.marks().all_client()) return v;
    const auto& words = markup_.words;
    if (std::find(words.begin(), words.end(), v.str()) == words.end()) return v;
    return v.WithMarks(Marks::Template());
  }

  static Json DataOf(const Value& v) {
    RequireDefined(v);
    if (!v.is_data())
      throw TemplateError("a " + v.TypeName() + " cannot be stored in a list or dict");
    return v.data();
  }

  Value EvalCall(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (IsLoopCycle(callee)) return LoopCycle(e);
    if (callee.kind == Expr::Kind::kAttribute) {  // methods: "text".strip(), d.items(), ...
      const Value object = Eval(*callee.args[0]);
      RequireDefined(object);
      const CallArgs args = EvalArgs(e, 1);
      if (std::optional<Value> result = CallMethod(object, callee.name, args)) return *result;
      return CallValue(GetAttribute(object, callee.name), args, callee.name);
    }
    const Value function = Eval(callee);
    return CallValue(function, EvalArgs(e, 1), callee.kind == Expr::Kind::kName ? callee.name : "");
  }

  // loop.cycle(a, b, ...): `loop` cannot be assigned in Jinja, so the name identifies it.
  static bool IsLoopCycle(const Expr& callee) {
    return callee.kind == Expr::Kind::kAttribute && callee.name == "cycle" &&
           callee.args[0]->kind == Expr::Kind::kName && callee.args[0]->name == "loop";
  }

  Value LoopCycle(const Expr& call) {
    const Value loop = Lookup("loop");
    if (!loop.is_dict() || !loop.data().contains("index0") ||
        !loop.data()["index0"].is_number_integer()) {
      throw TemplateError("loop.cycle() outside of a for loop");
    }
    const CallArgs args = EvalArgs(call, 1);
    if (args.positional.empty()) throw TemplateError("no items for cycling given");
    const int64_t index = loop.data().at("index0").get<int64_t>();
    return args.positional[static_cast<size_t>(index) % args.positional.size()];
  }

  Value CallValue(const Value& function, const CallArgs& args, const std::string& name) {
    if (function.kind() == Value::Kind::kBuiltin) return CallGlobal(function.text(), args);
    if (function.kind() == Value::Kind::kMacro) return CallMacro(*function.macro(), args);
    if (function.is_undefined()) throw TemplateError(function.text());
    throw TemplateError("'" + (name.empty() ? function.TypeName() : name) + "' is not callable");
  }

  Value CallMacro(const Stmt& macro, const CallArgs& args) {
    if (args.positional.size() > macro.params.size()) {
      throw TemplateError("macro '" + macro.name + "' takes not more than " +
                          std::to_string(macro.params.size()) + " argument(s)");
    }
    Scope call_scope;
    call_scope.is_macro_call = true;
    auto& scope = call_scope.vars;
    for (size_t i = 0; i < args.positional.size(); ++i)
      scope[macro.params[i].first] = args.positional[i];
    for (const auto& [key, value] : args.keyword) {
      const std::string& name = key;  // clang 14 cannot capture a structured binding
      const auto it = std::find_if(macro.params.begin(), macro.params.end(),
                                   [&](const auto& p) { return p.first == name; });
      if (it == macro.params.end()) {
        throw TemplateError("macro '" + macro.name + "' takes no keyword argument '" + key + "'");
      }
      scope[key] = value;
    }
    // Defaults are evaluated at each call.
    for (const auto& [param, default_value] : macro.params) {
      if (scope.contains(param)) continue;
      scope[param] = default_value ? Eval(*default_value)
                                   : Value::Undefined("parameter '" + param + "' was not provided");
    }
    const ScopeGuard guard(*this, std::move(call_scope));
    return ValueOf(Capture(macro.body));
  }

  Value variables_;
  const Markup& markup_;
  std::vector<Scope> scopes_;
  MarkedString* out_ = nullptr;
  int call_depth_ = 0;
};

}  // namespace

MarkedString RenderBody(const Body& body, const Json& variables, const Markup& markup) {
  return Renderer(variables, markup).Render(body);
}

}  // namespace tokenmill::jinja
