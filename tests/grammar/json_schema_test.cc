#include "grammar/json_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "tests/grammar/test_vocab.h"

namespace tokenmill::grammar {
namespace {

using ::testing::HasSubstr;

// Whether the grammar of `schema` matches `text` in full.
bool Matches(const std::string& schema, const std::string& text) {
  static const auto vocab = testing::SmallVocabulary();
  GrammarMatcher matcher(testing::MustCompile(GrammarSpec::Kind::kJsonSchema, schema, vocab));
  return matcher.AcceptBytes(text) && matcher.CanTerminate();
}

TEST(JsonSchemaTest, ObjectsKeepPropertyOrderAndRequireWhatIsRequired) {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"]})";
  EXPECT_TRUE(Matches(schema, R"({"b": "x"})"));
  EXPECT_TRUE(Matches(schema, R"({"a": 1, "b": "x", "c": true})"));
  EXPECT_TRUE(Matches(schema, R"({"a": -20, "b": ""})"));
  EXPECT_FALSE(Matches(schema, R"({"a": 1})"));
  EXPECT_FALSE(Matches(schema, R"({"b": "x", "a": 1})"));
  EXPECT_FALSE(Matches(schema, R"({"b": "x", "d": 1})"));  // no additionalProperties
  EXPECT_FALSE(Matches(schema, R"({"b":"x"})"));          // compact separators only
}

TEST(JsonSchemaTest, AdditionalPropertiesAndEmptyObjects) {
  EXPECT_TRUE(Matches(R"({"type": "object"})", "{}"));
  EXPECT_FALSE(Matches(R"({"type": "object"})", R"({"a": 1})"));
  const std::string open = R"({"type": "object", "additionalProperties": {"type": "integer"}})";
  EXPECT_TRUE(Matches(open, "{}"));
  EXPECT_TRUE(Matches(open, R"({"x": 1, "y": 2})"));
  EXPECT_FALSE(Matches(open, R"({"x": "1"})"));
  EXPECT_TRUE(Matches(R"({"type": "object", "additionalProperties": true})",
                      R"({"x": [1, {"y": null}]})"));
}

TEST(JsonSchemaTest, StringsLengthsPatternsAndFormats) {
  const std::string bounded = R"({"type": "string", "minLength": 2, "maxLength": 3})";
  EXPECT_FALSE(Matches(bounded, R"("a")"));
  EXPECT_TRUE(Matches(bounded, R"("ab")"));
  EXPECT_TRUE(Matches(bounded, R"("a\nb")"));  // an escape is one character
  EXPECT_TRUE(Matches(bounded, R"("€éa")"));
  EXPECT_FALSE(Matches(bounded, R"("abcd")"));
  const std::string pattern = R"({"type": "string", "pattern": "^[a-c]+\"?\\d$"})";
  EXPECT_TRUE(Matches(pattern, R"("abc\"7")"));
  EXPECT_TRUE(Matches(pattern, R"("a1")"));
  EXPECT_FALSE(Matches(pattern, R"("ab"7")"));
  EXPECT_TRUE(Matches(R"({"type": "string", "format": "date"})", R"("2026-12-01")"));
  EXPECT_FALSE(Matches(R"({"type": "string", "format": "date"})", R"("2026-13-01")"));
}

TEST(JsonSchemaTest, IntegerAndNumberBounds) {
  const std::string ints = R"({"type": "integer", "minimum": -12, "exclusiveMaximum": 105})";
  for (int v = -30; v <= 130; ++v) {
    EXPECT_EQ(Matches(ints, std::to_string(v)), v >= -12 && v < 105) << v;
  }
  const std::string numbers = R"({"type": "number", "exclusiveMinimum": -1.5, "maximum": 2})";
  EXPECT_TRUE(Matches(numbers, "-1"));
  EXPECT_TRUE(Matches(numbers, "-0.5"));
  EXPECT_TRUE(Matches(numbers, "1.25"));
  EXPECT_TRUE(Matches(numbers, "2"));
  EXPECT_FALSE(Matches(numbers, "2.5"));
  EXPECT_FALSE(Matches(numbers, "-2"));
  EXPECT_FALSE(Matches(numbers, "3"));
}

TEST(JsonSchemaTest, ArraysEnumsConstAnyOfRefsAndNullable) {
  const std::string arrays = R"({"type": "array", "items": {"enum": [1, "two", null]},
                                 "minItems": 1, "maxItems": 2})";
  EXPECT_FALSE(Matches(arrays, "[]"));
  EXPECT_TRUE(Matches(arrays, R"([1, "two"])"));
  EXPECT_FALSE(Matches(arrays, "[1, 1, 1]"));
  EXPECT_FALSE(Matches(arrays, "[2]"));
  const std::string tuple = R"({"prefixItems": [{"const": "x"}, {"type": "integer"}], "items": false})";
  EXPECT_TRUE(Matches(tuple, R"(["x", 3])"));
  EXPECT_FALSE(Matches(tuple, R"(["x", 3, 4])"));
  const std::string tree = R"({"$defs": {"t": {"type": "object", "properties": {
      "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "required": ["kids"]}},
      "$ref": "#/$defs/t"})";
  EXPECT_TRUE(Matches(tree, R"({"kids": [{"kids": []}, {"kids": [{"kids": []}]}]})"));
  EXPECT_FALSE(Matches(tree, R"({"kids": [{}]})"));
  const std::string either = R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}],
                                 "nullable": true})";
  EXPECT_TRUE(Matches(either, "7"));
  EXPECT_TRUE(Matches(either, R"("a")"));
  EXPECT_TRUE(Matches(either, "null"));
  EXPECT_FALSE(Matches(either, R"("ab")"));
}

TEST(JsonSchemaTest, ErrorsNameTheKeywordAndItsPath) {
  struct Case {
    const char* schema;
    const char* message;
  };
  for (const Case& c : {
           Case{R"({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}})",
                "JSON Schema at /properties/a: unsupported keyword 'multipleOf'"},
           Case{R"({"type": "strin"})", "JSON Schema at /type: unknown type 'strin'"},
           Case{R"({"$ref": "#/$defs/missing"})", "at /$ref: '#/$defs/missing' does not resolve"},
           Case{R"({"type": "string", "pattern": "(a"})", "at /pattern: regex at offset 2"},
           Case{R"({"items": {"uniqueItems": true}, "type": "array"})",
                "at /items: unsupported keyword 'uniqueItems'"},
           Case{R"({"type": "integer", "minimum": 5, "maximum": 1})", "the bounds leave no value"},
           Case{"{not json", "JSON Schema is not valid JSON"},
           Case{R"({"const": 1e999})", "number overflow parsing '1e999'"},
           Case{R"({"type": "array", "nullable": 4})", "at /nullable: must be true or false"},
       }) {
    const auto gbnf = JsonSchemaToGbnf(c.schema, GrammarLimits());
    ASSERT_FALSE(gbnf.ok()) << c.schema;
    EXPECT_EQ(gbnf.status().code(), StatusCode::kInvalidArgument) << c.schema;
    EXPECT_THAT(gbnf.status().message(), HasSubstr(c.message)) << c.schema;
  }
}

// "#" is the whole schema: a tree of itself works; a schema that is nothing but a reference
// to itself (every value, to a validator; no finite text to a grammar) is refused.
TEST(JsonSchemaTest, RefToTheRootRecursesOrIsRefusedWhenItIsNothingElse) {
  const std::string tree = R"({"type": "object", "properties": {"name": {"type": "string"},
      "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}, "required": ["name"]})";
  EXPECT_TRUE(Matches(tree, R"({"name": "a"})"));
  EXPECT_TRUE(Matches(tree, R"({"name": "a", "children": [{"name": "b", "children": []}]})"));
  EXPECT_TRUE(Matches(tree, R"({"name": "a", "children": [{"name": "b", "children": )"
                            R"([{"name": "c"}, {"name": "d"}]}]})"));
  EXPECT_FALSE(Matches(tree, R"({"name": "a", "children": [{"children": []}]})"));
  EXPECT_FALSE(Matches(tree, R"({"name": "a", "children": [{"name": "b"}, {"name": "c"}, )"
                             R"({"name": "d"}]})"));
  for (const char* schema : {R"({"$ref": "#"})", R"({"anyOf": [{"$ref": "#"}]})",
                             R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#"}},
                                 "$ref": "#/$defs/a"})"}) {
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::kJsonSchema;
    spec.text = schema;
    const Status status = CompileGrammar(spec, testing::SmallVocabulary(), GrammarLimits()).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << schema;
    EXPECT_THAT(status.message(), HasSubstr("can never match")) << schema;
    EXPECT_THAT(status.message(), HasSubstr("a $ref that reaches itself before any value"));
  }
}

}  // namespace
}  // namespace tokenmill::grammar
