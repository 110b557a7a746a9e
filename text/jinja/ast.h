// The parsed form of a template: statements holding expressions. Plain structs with one
// `kind` each; the parser builds them and the renderer walks them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tokenmill::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args: items (tuples are lists too)
    kDict,       // args: key0, value0, key1, value1, ...
    kAttribute,  // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], null when left out
    kCall,       // args[0](args[1..], kwargs)
    kFilter,     // args[0] | name(args[1..], kwargs); args[0] is null in a filter block
    kTest,       // args[0] is [not] name(args[1..]); `negated`
    kUnary,      // name in {"not", "-", "+"}: args[0]
    kBinary,     // args[0] name args[1], name in {+ - * / // % ** ~ and or}
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[0] if args[1] else args[2] (null: undefined)
  };

  Kind kind;
  SourcePos pos;
  Json literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (a null condition is the else branch)
    kFor,       // for targets in expr [if condition]: body [else: else_body]
    kSet,       // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // set targets[0] %}body{% endset (filter: optional, applied to body)
    kMacro,     // macro name(params = defaults): body
    kFilter,    // filter filter %}body{% endfilter
    kBreak,
    kContinue,
    kScope,  // body in a plain block, e.g. {% generation %}
  };

  Kind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;  // kFor: the `if` filter
  ExprPtr filter;     // kFilter, kSetBlock: a kFilter chain whose innermost subject is null
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attribute;                                // kSet on a namespace: targets[0].attribute
  std::string name;                                     // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (or null)
  Body body;
  Body else_body;
};

}  // namespace tokenmill::jinja
