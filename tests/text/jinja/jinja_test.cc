// The renderer's pieces on their own: tokens and whitespace control, Python value semantics,
// error messages with their positions, and the guards against runaway templates. Expected
// values are Python's own (repr, json.dumps, jinja2), written out by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "text/jinja/lexer.h"
#include "text/jinja/python_ops.h"
#include "text/jinja/template.h"

namespace tokenmill::jinja {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Render(const std::string& source, const Json& variables = Json::object()) {
  const StatusOr<Template> compiled = Template::Parse(source);
  if (!compiled.ok()) return "PARSE: " + compiled.status().message();
  const StatusOr<std::string> out = compiled->Render(variables);
  return out.ok() ? *out : "RENDER: " + out.status().message();
}

TEST(LexerTest, SplitsTextAndTagsWithPositions) {
  const std::vector<Token> tokens = Tokenize("hi {{ user.name }}\n{% if x %}");
  std::vector<TokenKind> kinds;
  for (const Token& t : tokens) kinds.push_back(t.kind);
  EXPECT_EQ(kinds,
            (std::vector<TokenKind>{TokenKind::kText, TokenKind::kVarBegin, TokenKind::kName,
                                    TokenKind::kOperator, TokenKind::kName, TokenKind::kVarEnd,
                                    TokenKind::kText, TokenKind::kBlockBegin, TokenKind::kName,
                                    TokenKind::kName, TokenKind::kBlockEnd, TokenKind::kEnd}));
  EXPECT_EQ(tokens[0].text, "hi ");
  EXPECT_EQ(tokens[4].text, "name");
  EXPECT_EQ(tokens[4].pos.line, 1);
  EXPECT_EQ(tokens[4].pos.column, 12);
  EXPECT_EQ(tokens[9].text, "x");
  EXPECT_EQ(tokens[9].pos.line, 2);
  EXPECT_EQ(tokens[9].pos.column, 7);
}

TEST(LexerTest, DecodesStringEscapesAndNumbers) {
  const std::vector<Token> tokens = Tokenize(R"({{ 'a\n\'b\u00e9\d' 1_000 2.5e3 }})");
  ASSERT_EQ(tokens[1].kind, TokenKind::kString);
  EXPECT_EQ(tokens[1].text, "a\n'b\xC3\xA9\\d");
  ASSERT_EQ(tokens[2].kind, TokenKind::kInteger);
  EXPECT_EQ(tokens[2].integer, 1000);
  ASSERT_EQ(tokens[3].kind, TokenKind::kFloat);
  EXPECT_EQ(tokens[3].number, 2500.0);
}

TEST(LexerTest, BracesInsideAnExpressionDoNotEndIt) {
  EXPECT_EQ(Render("{{ {'a': {'b': 1}}['a'] }}"), "{'b': 1}");
}

TEST(WhitespaceTest, TrimBlocksAndLstripBlocks) {
  // trim_blocks eats the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(Render("<\n  {% if true %}\n  x\n  {% endif %}\n>"), "<\n  x\n>");
  // Not after an expression, and not the indentation of an expression.
  EXPECT_EQ(Render("  {{ 1 }}\n"), "  1");
}

TEST(WhitespaceTest, MinusAndPlusMarkers) {
  EXPECT_EQ(Render("a \n {%- if true -%} \n b \n {%- endif %}"), "ab");
  EXPECT_EQ(Render("a\n  {%+ if true +%}\nb{% endif %}"), "a\n  \nb");
  EXPECT_EQ(Render("a {{- 'b' -}} c"), "abc");
}

TEST(WhitespaceTest, NewlinesNormalizedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(Render("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(Render("a\n\n"), "a\n");
}

TEST(PythonOpsTest, FloatsPrintLikePythonRepr) {
  EXPECT_EQ(FormatFloat(1.0), "1.0");
  EXPECT_EQ(FormatFloat(0.1), "0.1");
  EXPECT_EQ(FormatFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatFloat(1e16), "1e+16");
  EXPECT_EQ(FormatFloat(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(FormatFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatFloat(0.00001), "1e-05");
  EXPECT_EQ(FormatFloat(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FormatFloat(1.5e300), "1.5e+300");
}

TEST(PythonOpsTest, ReprAndStr) {
  EXPECT_EQ(PyRepr(Json::parse(R"({"a": [1, 2.0, null, true], "b": "it's", "c": "x"})")),
            R"({'a': [1, 2.0, None, True], 'b': "it's", 'c': 'x'})");
  EXPECT_EQ(PyRepr("both ' and \""), R"('both \' and "')");
  EXPECT_EQ(PyRepr("tab\tnl\n\x01"), R"('tab\tnl\n\x01')");
  EXPECT_EQ(PyStr(Value::Of("plain")), "plain");
  EXPECT_EQ(PyStr(Value()), "");
  EXPECT_EQ(PyStr(Value::Of(nullptr)), "None");
}

TEST(PythonOpsTest, JsonDumpsLikePython) {
  const Json v = Json::parse(R"({"k": ["\u00e9", 1.5, {}, []], "<&>": "\u0001\"\\"})");
  EXPECT_EQ(PyJsonDumps(v, {}), R"({"k": ["é", 1.5, {}, []], "<&>": "\u0001\"\\"})");
  JsonDumpOptions indented;
  indented.indent = 2;
  EXPECT_EQ(PyJsonDumps(Json::parse(R"({"a": [1]})"), indented), "{\n  \"a\": [\n    1\n  ]\n}");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(PyJsonDumps("é😀", ascii), R"("\u00e9\ud83d\ude00")");
  JsonDumpOptions compact;
  compact.separators = std::make_pair(",", ":");
  compact.sort_keys = true;
  EXPECT_EQ(PyJsonDumps(Json::parse(R"({"b": 1, "a": [1, 2]})"), compact), R"({"a":[1,2],"b":1})");
}

TEST(PythonOpsTest, TruthinessAndEquality) {
  EXPECT_FALSE(Truthy(Value::Of("")));
  EXPECT_TRUE(Truthy(Value::Of(" ")));
  EXPECT_FALSE(Truthy(Value::Of(Json::array())));
  EXPECT_FALSE(Truthy(Value::Of(0.0)));
  EXPECT_FALSE(Truthy(Value()));
  EXPECT_TRUE(PyEqual(Json(1), Json(1.0)));
  EXPECT_TRUE(PyEqual(Json(true), Json(1)));
  EXPECT_FALSE(PyEqual(Json("1"), Json(1)));
  EXPECT_EQ(PyCompare(Json(-1), Json(uint64_t{1} << 63)), -1);
  EXPECT_THROW(PyCompare(Json(1), Json("a")), TemplateError);
}

TEST(PythonOpsTest, CodePointsNotBytes) {
  EXPECT_EQ(Render("{{ s | length }} {{ s[1] }} {{ s[::-1] }}", {{"s", "añ日"}}), "3 ñ 日ña");
  EXPECT_EQ(DecodeUtf8("a\xFF"), std::u32string(U"a\xFF"));  // a stray byte stays one unit
}

TEST(ErrorTest, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(Render("line one\n{{ x | frobnicate }}"),
            "PARSE: template syntax error at line 2, column 8: unknown filter 'frobnicate'");
  EXPECT_EQ(Render("{% if x is frob %}{% endif %}"),
            "PARSE: template syntax error at line 1, column 12: unknown test 'frob'");
  EXPECT_EQ(Render("a\n  {% frob %}"),
            "PARSE: template syntax error at line 2, column 6: unknown tag 'frob'");
  EXPECT_EQ(Render("{% for m in messages %}\n{{ m }}"),
            "PARSE: template syntax error at line 2, column 8: unexpected end of template: "
            "'{% for %}' at line 1 is not closed (expected '{% endfor %}')");
  EXPECT_EQ(Render("{{ 'abc }}"),
            "PARSE: template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(Render("{{ 1 + }}"),
            "PARSE: template syntax error at line 1, column 8: expected an expression, got '}}'");
  EXPECT_EQ(Render("{% break %}"),
            "PARSE: template syntax error at line 1, column 4: 'break' outside of a loop");
  EXPECT_EQ(Render("ok\n{% raw %}{{ x }}"),
            "PARSE: template syntax error at line 2, column 1: unclosed raw block: missing "
            "'{% endraw %}'");
  EXPECT_EQ(Render("{% include 'x.jinja' %}"),
            "PARSE: template syntax error at line 1, column 4: '{% include %}' is a Jinja tag "
            "this renderer does not support");
  EXPECT_EQ(Render("{% if true %}{% endfor %}"),
            "PARSE: template syntax error at line 1, column 17: unknown tag 'endfor'");
}

TEST(ErrorTest, RenderErrorsNameLineAndColumn) {
  EXPECT_EQ(Render("Hi\n  {{ 'a' + 1 }}"),
            "RENDER: template error at line 2, column 10: unsupported operand types for +: "
            "'str' and 'int'");
  EXPECT_EQ(Render("{{ user.name }}"),
            "RENDER: template error at line 1, column 8: 'user' is undefined");
  EXPECT_EQ(Render("{{ m.missing + 'x' }}", {{"m", Json::object()}}),
            "RENDER: template error at line 1, column 14: 'dict object' has no attribute "
            "'missing'");
  EXPECT_EQ(Render("{% set l = [] %}{{ l.append(1) }}"),
            "RENDER: template error at line 1, column 21: access to attribute 'append' of 'list' "
            "object is unsafe.");
  EXPECT_EQ(Render("{{ x | tojson }}"),
            "RENDER: template error at line 1, column 8: Object of type Undefined is not JSON "
            "serializable");
}

TEST(ErrorTest, LoopCycleNeedsALoop) {
  EXPECT_EQ(Render("{{ loop.cycle(1, 2) }}"),
            "RENDER: template error at line 1, column 8: loop.cycle() outside of a for loop");
  EXPECT_EQ(Render("{{ loop.cycle(1) }}", {{"loop", {{"index0", "x"}}}}),
            "RENDER: template error at line 1, column 8: loop.cycle() outside of a for loop");
}

TEST(ErrorTest, RaiseExceptionCarriesTheTemplatesMessage) {
  EXPECT_EQ(Render("{% if true %}\n  {{ raise_exception('Roles must alternate') }}{% endif %}"),
            "RENDER: template raised an error at line 2, column 6: Roles must alternate");
}

TEST(GuardTest, RunawayTemplatesFailInsteadOfHanging) {
  EXPECT_THAT(Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
              HasSubstr("macro calls nested deeper than 100"));
  EXPECT_THAT(Render("{% for i in range(100001) %}{% endfor %}"),
              HasSubstr("Range too big. The sandbox blocks ranges larger than MAX_RANGE"));
  EXPECT_THAT(Render("{{ 'x' * 100000000 }}"), HasSubstr("too large"));
  EXPECT_THAT(Render("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              HasSubstr("a string would exceed 67108864 bytes"));
  EXPECT_THAT(Render("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}"),
              HasSubstr("a string would exceed"));
  EXPECT_THAT(Render("{{ ('x' * 10000000) | replace('x', 'yyyyyyyyyy') }}"),
              HasSubstr("a string would exceed"));
}

TEST(GuardTest, DeepNestingIsAnErrorNotAStackOverflow) {
  EXPECT_THAT(Render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
              HasSubstr("nests blocks or expressions deeper than 100 levels"));
  EXPECT_THAT(Render("{{ " + std::string(5000, '-') + "1 }}"), HasSubstr("deeper than 100"));
  std::string nested_ifs;
  for (int i = 0; i < 500; ++i) nested_ifs += "{% if true %}";
  EXPECT_THAT(Render(nested_ifs), HasSubstr("deeper than 100"));
  // Values built by the template, and values passed in.
  EXPECT_THAT(Render("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}"
                     "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
              HasSubstr("a value nests deeper than 128 levels"));
  Json deep = Json::array();
  for (int i = 0; i < 100; ++i) deep = Json::array({deep});
  EXPECT_EQ(Render("{{ v }}", {{"v", deep}}),
            "RENDER: template variables nest deeper than 64 levels");
}

TEST(ScopeTest, LoopAndMacroScopesFollowJinja) {
  // A set inside a loop lives for one iteration; namespace() carries values out.
  EXPECT_EQ(Render("{% set x = 0 %}{% set ns = namespace(n=0) %}{% for i in [1, 2] %}"
                   "{% set x = i %}{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}"),
            "0 3");
  // Macros see the template's top level at call time, not the caller's loop.
  EXPECT_EQ(Render("{% macro m() %}{{ g }}{{ loop is defined }}{% endmacro %}{% set g = 'G' %}"
                   "{% for i in [1] %}{{ m() }}{% endfor %}"),
            "GFalse");
  EXPECT_EQ(Render("{% set ns = 1 %}{% set ns.x = 2 %}"),
            "RENDER: template error at line 1, column 20: cannot assign attribute on "
            "non-namespace object 'ns'");
}

TEST(TemplateTest, VariablesMustBeAnObject) {
  const StatusOr<Template> compiled = Template::Parse("x");
  ASSERT_TRUE(compiled.ok());
  EXPECT_FALSE(compiled->Render(Json::array()).ok());
}

}  // namespace
}  // namespace tokenmill::jinja
