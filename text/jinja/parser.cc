#include "text/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "text/jinja/builtins.h"
#include "text/jinja/python_ops.h"

namespace tokenmill::jinja {
namespace {

constexpr int kMaxNesting = 100;

std::string Describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVarBegin:
      return "'{{'";
    case TokenKind::kVarEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kString:
      return "a string";
    case TokenKind::kEnd:
      return "the end of the template";
    default:
      return "'" + t.text + "'";
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body ParseTemplate() {
    Body body = ParseBody({});
    return body;
  }

 private:
  // ------------------------------------------------------------------ token helpers
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    const Token& t = Peek(ahead);
    return t.kind == TokenKind::kOperator && t.text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    const Token& t = Peek(ahead);
    return t.kind == TokenKind::kName && t.text == name;
  }
  bool AcceptOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  [[noreturn]] void Fail(const std::string& message, const Token& at) const {
    throw TemplateError(message, at.pos);
  }
  void ExpectOp(const char* op) {
    if (!AcceptOp(op)) Fail(std::string("expected '") + op + "', got " + Describe(Peek()), Peek());
  }
  std::string ExpectName(const char* what) {
    if (Peek().kind != TokenKind::kName)
      Fail(std::string("expected ") + what + ", got " + Describe(Peek()), Peek());
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != TokenKind::kBlockEnd) Fail("expected '%}', got " + Describe(Peek()), Peek());
    Next();
  }

  static ExprPtr Make(Expr::Kind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ------------------------------------------------------------------ statements
  // Parses until `{% <one of end_tags>`, leaving the position on that tag's name.
  Body ParseBody(std::initializer_list<const char*> end_tags) {
    Body body;
    while (true) {
      const Token& t = Peek();
      switch (t.kind) {
        case TokenKind::kEnd:
          if (end_tags.size() != 0) {
            const Token& opener = *open_blocks_.back();
            Fail(StrCat({"unexpected end of template: '{% ", opener.text, " %}' at line ",
                         std::to_string(opener.pos.line), " is not closed (expected '{% ",
                         *(end_tags.end() - 1), " %}')"}),
                 t);
          }
          return body;
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kText;
          s->pos = t.pos;
          s->text = Next().text;
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kVarBegin: {
          Next();
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kOutput;
          s->pos = Peek().pos;
          s->expr = ParseTupleOrExpression();
          if (Peek().kind != TokenKind::kVarEnd)
            Fail("expected '}}', got " + Describe(Peek()), Peek());
          Next();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = Peek(1);
          if (name.kind != TokenKind::kName) Fail("expected a tag name after '{%'", name);
          for (const char* end : end_tags) {
            if (name.text == end) {
              Next();  // '{%'
              return body;
            }
          }
          Next();
          body.push_back(ParseStatement());
          break;
        }
        default:
          Fail("unexpected " + Describe(t), t);
      }
    }
  }

  StmtPtr ParseStatement() {
    const Token& tag = Next();
    const DepthGuard depth(*this, tag);
    open_blocks_.push_back(&tag);
    StmtPtr s = ParseTag(tag);
    open_blocks_.pop_back();
    return s;
  }

  StmtPtr ParseTag(const Token& tag) {
    auto s = std::make_unique<Stmt>();
    s->pos = tag.pos;
    const std::string& name = tag.text;
    if (name == "if") return ParseIf(std::move(s));
    if (name == "for") return ParseFor(std::move(s));
    if (name == "set") return ParseSet(std::move(s));
    if (name == "macro") return ParseMacro(std::move(s));
    if (name == "filter") {
      s->kind = Stmt::Kind::kFilter;
      s->filter = ParseFilterChain(nullptr);
      ExpectBlockEnd();
      s->body = ParseBody({"endfilter"});
      ExpectEndTag("endfilter");
      return s;
    }
    if (name == "break" || name == "continue") {
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      if (loop_depth_ == 0) Fail("'" + name + "' outside of a loop", tag);
      ExpectBlockEnd();
      return s;
    }
    if (name == "generation") {  // Hugging Face's AssistantTracker: renders its body as is
      s->kind = Stmt::Kind::kScope;
      ExpectBlockEnd();
      s->body = ParseBody({"endgeneration"});
      ExpectEndTag("endgeneration");
      return s;
    }
    static constexpr std::string_view kUnsupported[] = {
        "autoescape", "block", "call", "extends", "from", "import", "include", "with"};
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), name) !=
        std::end(kUnsupported)) {
      Fail("'{% " + name + " %}' is a Jinja tag this renderer does not support", tag);
    }
    Fail("unknown tag '" + name + "'", tag);
  }

  void ExpectEndTag(const char* name) {
    if (!AcceptName(name)) Fail(std::string("expected '") + name + "'", Peek());
    ExpectBlockEnd();
  }

  StmtPtr ParseIf(StmtPtr s) {
    s->kind = Stmt::Kind::kIf;
    ExprPtr condition = ParseExpression();
    while (true) {
      ExpectBlockEnd();
      Body body = ParseBody({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(condition), std::move(body));
      const Token& tag = Next();
      if (tag.text == "elif") {
        condition = ParseExpression();
        continue;
      }
      if (tag.text == "else") {
        ExpectBlockEnd();
        s->branches.emplace_back(nullptr, ParseBody({"endif"}));
        Next();
      }
      ExpectBlockEnd();
      return s;
    }
  }

  StmtPtr ParseFor(StmtPtr s) {
    s->kind = Stmt::Kind::kFor;
    do {
      s->targets.push_back(ExpectName("a loop variable"));
    } while (AcceptOp(","));
    if (!AcceptName("in")) Fail("expected 'in' in for loop, got " + Describe(Peek()), Peek());
    s->expr = ParseExpression(/*with_condition=*/false);
    if (AcceptName("if")) s->condition = ParseExpression(/*with_condition=*/false);
    if (IsName("recursive")) Fail("recursive loops are not supported", Peek());
    ExpectBlockEnd();
    ++loop_depth_;
    s->body = ParseBody({"else", "endfor"});
    --loop_depth_;
    if (Next().text == "else") {
      ExpectBlockEnd();
      s->else_body = ParseBody({"endfor"});
      Next();
    }
    ExpectBlockEnd();
    return s;
  }

  StmtPtr ParseSet(StmtPtr s) {
    s->targets.push_back(ExpectName("a variable name"));
    if (AcceptOp(".")) {
      s->attribute = ExpectName("an attribute name");
    } else {
      while (AcceptOp(",")) s->targets.push_back(ExpectName("a variable name"));
    }
    if (AcceptOp("=")) {
      s->kind = Stmt::Kind::kSet;
      s->expr = ParseTupleOrExpression();
      ExpectBlockEnd();
      return s;
    }
    if (s->targets.size() != 1 || !s->attribute.empty()) Fail("expected '='", Peek());
    s->kind = Stmt::Kind::kSetBlock;
    if (IsOp("|")) s->filter = ParseFilterChain(nullptr);
    ExpectBlockEnd();
    s->body = ParseBody({"endset"});
    ExpectEndTag("endset");
    return s;
  }

  StmtPtr ParseMacro(StmtPtr s) {
    s->kind = Stmt::Kind::kMacro;
    s->name = ExpectName("a macro name");
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!s->params.empty()) ExpectOp(",");
      std::string param = ExpectName("a parameter name");
      ExprPtr default_value;
      if (AcceptOp("=")) default_value = ParseExpression();
      s->params.emplace_back(std::move(param), std::move(default_value));
    }
    ExpectOp(")");
    ExpectBlockEnd();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    s->body = ParseBody({"endmacro"});
    loop_depth_ = saved_loop_depth;
    Next();
    if (Peek().kind == TokenKind::kName && Peek().text == s->name) Next();
    ExpectBlockEnd();
    return s;
  }

  // ------------------------------------------------------------------ expressions
  // `a, b` without brackets is a tuple (a list here), as in {{ a, b }} and set x = a, b.
  ExprPtr ParseTupleOrExpression() {
    const SourcePos pos = Peek().pos;
    ExprPtr first = ParseExpression();
    if (!IsOp(",")) return first;
    auto list = Make(Expr::Kind::kList, pos);
    list->args.push_back(std::move(first));
    while (AcceptOp(",")) {
      if (Peek().kind == TokenKind::kBlockEnd || Peek().kind == TokenKind::kVarEnd) break;
      list->args.push_back(ParseExpression());
    }
    return list;
  }

  ExprPtr ParseExpression(bool with_condition = true) {
    const DepthGuard depth(*this, Peek());
    if (!with_condition) return ParseOr();
    const SourcePos pos = Peek().pos;
    ExprPtr value = ParseOr();
    while (AcceptName("if")) {
      auto cond = Make(Expr::Kind::kCondition, pos);
      cond->args.push_back(std::move(value));
      cond->args.push_back(ParseOr());
      cond->args.push_back(AcceptName("else") ? ParseExpression() : nullptr);
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr Binary(const std::string& op, ExprPtr left, ExprPtr right, SourcePos pos) {
    auto e = Make(Expr::Kind::kBinary, pos);
    e->name = op;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      const SourcePos pos = Next().pos;
      left = Binary("or", std::move(left), ParseAnd(), pos);
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      const SourcePos pos = Next().pos;
      left = Binary("and", std::move(left), ParseNot(), pos);
    }
    return left;
  }

  ExprPtr ParseNot() {
    const DepthGuard depth(*this, Peek());
    if (IsName("not")) {
      auto e = Make(Expr::Kind::kUnary, Next().pos);
      e->name = "not";
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const SourcePos pos = Peek().pos;
    ExprPtr first = ParseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Peek().kind == TokenKind::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
           Peek().text == "<=" || Peek().text == ">" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare, pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      left = Binary(op.text, std::move(left), ParseConcat(), op.pos);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      const SourcePos pos = Next().pos;
      left = Binary("~", std::move(left), ParseMath2(), pos);
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      left = Binary(op.text, std::move(left), ParsePow(), op.pos);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const SourcePos pos = Next().pos;
      left = Binary("**", std::move(left), ParseUnary(true), pos);
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    const DepthGuard depth(*this, Peek());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      node = Make(Expr::Kind::kUnary, op.pos);
      node->name = op.text;
      node->args.push_back(ParseUnary(false));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token& t = Peek();
    switch (t.kind) {
      case TokenKind::kName: {
        Next();
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = Make(Expr::Kind::kLiteral, t.pos);
          e->literal = t.text == "true" || t.text == "True";
          return e;
        }
        if (t.text == "none" || t.text == "None") return Make(Expr::Kind::kLiteral, t.pos);
        auto e = Make(Expr::Kind::kName, t.pos);
        e->name = t.text;
        return e;
      }
      case TokenKind::kString: {
        auto e = Make(Expr::Kind::kLiteral, t.pos);
        std::string value;
        while (Peek().kind == TokenKind::kString) value += Next().text;  // "a" "b" == "ab"
        e->literal = value;
        return e;
      }
      case TokenKind::kInteger: {
        auto e = Make(Expr::Kind::kLiteral, Next().pos);
        e->literal = t.integer;
        return e;
      }
      case TokenKind::kFloat: {
        auto e = Make(Expr::Kind::kLiteral, Next().pos);
        e->literal = t.number;
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") return ParseParenthesized();
        if (t.text == "[") return ParseList();
        if (t.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    Fail("expected an expression, got " + Describe(t), t);
  }

  ExprPtr ParseParenthesized() {
    const SourcePos pos = Next().pos;
    if (AcceptOp(")")) return Make(Expr::Kind::kList, pos);  // ()
    ExprPtr first = ParseExpression();
    if (AcceptOp(")")) return first;
    auto tuple = Make(Expr::Kind::kList, pos);
    tuple->args.push_back(std::move(first));
    while (AcceptOp(",")) {
      if (IsOp(")")) break;
      tuple->args.push_back(ParseExpression());
    }
    ExpectOp(")");
    return tuple;
  }

  ExprPtr ParseList() {
    auto list = Make(Expr::Kind::kList, Next().pos);
    while (!IsOp("]")) {
      if (!list->args.empty()) ExpectOp(",");
      if (IsOp("]")) break;
      list->args.push_back(ParseExpression());
    }
    ExpectOp("]");
    return list;
  }

  ExprPtr ParseDict() {
    auto dict = Make(Expr::Kind::kDict, Next().pos);
    while (!IsOp("}")) {
      if (!dict->args.empty()) ExpectOp(",");
      if (IsOp("}")) break;
      dict->args.push_back(ParseExpression());
      ExpectOp(":");
      dict->args.push_back(ParseExpression());
    }
    ExpectOp("}");
    return dict;
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const SourcePos pos = Next().pos;
        const Token& t = Next();
        if (t.kind == TokenKind::kInteger) {  // foo.0 is foo[0]
          auto item = Make(Expr::Kind::kItem, pos);
          item->args.push_back(std::move(node));
          auto index = Make(Expr::Kind::kLiteral, t.pos);
          index->literal = t.integer;
          item->args.push_back(std::move(index));
          node = std::move(item);
          continue;
        }
        if (t.kind != TokenKind::kName) Fail("expected an attribute name after '.'", t);
        auto attr = Make(Expr::Kind::kAttribute, pos);
        attr->name = t.text;
        attr->args.push_back(std::move(node));
        node = std::move(attr);
      } else if (IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    const SourcePos pos = Next().pos;
    ExprPtr parts[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (AcceptOp(":")) {
        if (++colons > 2) Fail("too many ':' in slice", Peek());
        continue;
      }
      if (parts[colons]) Fail("expected ']' or ':', got " + Describe(Peek()), Peek());
      parts[colons] = ParseExpression();
    }
    ExpectOp("]");
    if (colons == 0) {
      if (!parts[0]) Fail("expected a subscript", Peek());
      auto item = Make(Expr::Kind::kItem, pos);
      item->args.push_back(std::move(node));
      item->args.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = Make(Expr::Kind::kSlice, pos);
    slice->args.push_back(std::move(node));
    for (ExprPtr& part : parts) slice->args.push_back(std::move(part));
    return slice;
  }

  // Fills e->args (after the existing ones) and e->kwargs from "(a, b, key=c)".
  void ParseArguments(Expr& e) {
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        e.kwargs.emplace_back(std::move(key), ParseExpression());
      } else {
        if (!e.kwargs.empty()) Fail("positional argument after a keyword argument", Peek());
        e.args.push_back(ParseExpression());
      }
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto call = Make(Expr::Kind::kCall, callee->pos);
    call->args.push_back(std::move(callee));
    ParseArguments(*call);
    return call;
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilterChain(std::move(node));
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  // `| f(args) | g ...` applied to `subject` (null in filter blocks).
  ExprPtr ParseFilterChain(ExprPtr subject) {
    bool first = true;
    while (first || IsOp("|")) {
      if (!first || IsOp("|")) ExpectOp("|");
      first = false;
      const Token& name = Peek();
      auto filter = Make(Expr::Kind::kFilter, name.pos);
      filter->name = ExpectName("a filter name");
      if (!IsKnownFilter(filter->name)) Fail("unknown filter '" + filter->name + "'", name);
      filter->args.push_back(std::move(subject));
      if (IsOp("(")) ParseArguments(*filter);
      subject = std::move(filter);
    }
    return subject;
  }

  ExprPtr ParseTest(ExprPtr subject) {
    Next();  // 'is'
    auto test = Make(Expr::Kind::kTest, Peek().pos);
    test->negated = AcceptName("not");
    const Token& name = Peek();
    if (name.kind == TokenKind::kName) {
      test->name = Next().text;
    } else if (name.kind == TokenKind::kOperator &&
               (name.text == "==" || name.text == "!=" || name.text == "<" || name.text == "<=" ||
                name.text == ">" || name.text == ">=")) {
      test->name = Next().text;
    } else {
      Fail("expected a test name after 'is', got " + Describe(name), name);
    }
    if (!IsKnownTest(test->name)) Fail("unknown test '" + test->name + "'", name);
    test->args.push_back(std::move(subject));
    if (IsOp("(")) {
      ParseArguments(*test);
    } else {
      const Token& t = Peek();
      const bool starts_argument =
          t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
          t.kind == TokenKind::kFloat || IsOp("[") || IsOp("{") ||
          (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and" &&
           t.text != "if" && t.text != "in" && t.text != "not" && t.text != "is");
      if (starts_argument) test->args.push_back(ParsePostfix(ParsePrimary()));
    }
    return test;
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  // Bounds the parser's recursion (and the renderer's, which follows the tree) so that a
  // hostile template cannot overflow the stack.
  class DepthGuard {
   public:
    DepthGuard(Parser& parser, const Token& at) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting) {
        throw TemplateError("the template nests blocks or expressions deeper than " +
                                std::to_string(kMaxNesting) + " levels",
                            at.pos);
      }
    }
    ~DepthGuard() { --parser_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser& parser_;
  };

  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<const Token*> open_blocks_;  // the tag names of the blocks being parsed
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace tokenmill::jinja
