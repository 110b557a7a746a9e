// The structured-output fields of every dialect (OpenAI, vLLM, llama-server) -> the v1 oneof,
// and each malformed one refused with a 400 naming its field.
#include <gtest/gtest.h>

#include "gateway/api/openai/request_mapping.h"
#include "gateway/api/openai/structured_output.h"
#include "gateway/http/request_body.h"

namespace tokenmill::gateway {
namespace {

using nlohmann::json;

json Chat(const json& fields) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  body.update(fields);
  return body;
}

CompletionRequest ParseOk(const json& body, Endpoint endpoint = Endpoint::kChatCompletions) {
  CompletionRequest out;
  const std::optional<HttpError> error = ParseCompletionRequest(body, endpoint, out);
  EXPECT_FALSE(error.has_value()) << body.dump() << ": " << (error ? error->message : "");
  return out;
}

HttpError ParseError(const json& body, Endpoint endpoint = Endpoint::kChatCompletions) {
  CompletionRequest out;
  std::optional<HttpError> error = ParseCompletionRequest(body, endpoint, out);
  EXPECT_TRUE(error.has_value()) << body.dump();
  return error.value_or(HttpError{});
}

const json kSchema = json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                                     "required": ["a"]})");

TEST(GatewayStructuredOutput, OpenAiResponseFormat) {
  const CompletionRequest schema = ParseOk(Chat(
      {{"response_format",
        {{"type", "json_schema"},
         {"json_schema", {{"name", "thing"}, {"strict", true}, {"schema", kSchema}}}}}}));
  const v1::SamplingParams& s = schema.generates[0].sampling();
  ASSERT_EQ(s.structured_output_case(), v1::SamplingParams::kJsonSchema);
  EXPECT_EQ(json::parse(s.json_schema()), kSchema);
  EXPECT_EQ(schema.structured_output_param, "response_format");

  const CompletionRequest object = ParseOk(Chat({{"response_format", {{"type", "json_object"}}}}));
  EXPECT_EQ(object.generates[0].sampling().structured_output_case(),
            v1::SamplingParams::kJsonObject);
  const CompletionRequest text = ParseOk(Chat({{"response_format", {{"type", "text"}}}}));
  EXPECT_EQ(text.generates[0].sampling().structured_output_case(),
            v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET);
  EXPECT_EQ(text.structured_output_param, "");

  // /v1/completions takes it too, for every prompt.
  const CompletionRequest completion = ParseOk(
      json{{"prompt", {"a", "b"}}, {"response_format", {{"type", "json_object"}}}},
      Endpoint::kCompletions);
  ASSERT_EQ(completion.generates.size(), 2u);
  for (const v1::GenerateRequest& g : completion.generates) {
    EXPECT_EQ(g.sampling().structured_output_case(), v1::SamplingParams::kJsonObject);
  }
}

TEST(GatewayStructuredOutput, VllmAndLlamaServerFields) {
  const auto kind = [](const json& fields) {
    const CompletionRequest r = ParseOk(Chat(fields));
    return std::pair(r.generates[0].sampling(), r.structured_output_param);
  };
  auto [s, param] = kind({{"structured_outputs", {{"regex", "[a-z]+"}}}});
  EXPECT_EQ(s.regex(), "[a-z]+");
  EXPECT_EQ(param, "structured_outputs");
  std::tie(s, param) = kind({{"structured_outputs", {{"choice", {"yes", "no"}}}}});
  ASSERT_EQ(s.structured_output_case(), v1::SamplingParams::kChoice);
  EXPECT_EQ(s.choice().choices_size(), 2);
  EXPECT_EQ(s.choice().choices(1), "no");
  std::tie(s, param) = kind({{"structured_outputs", {{"json", kSchema}}}});
  EXPECT_EQ(json::parse(s.json_schema()), kSchema);
  // vLLM accepts the schema as a string too: passed on as it is.
  std::tie(s, param) = kind({{"structured_outputs", {{"json", kSchema.dump()}}}});
  EXPECT_EQ(s.json_schema(), kSchema.dump());
  std::tie(s, param) = kind({{"structured_outputs", {{"grammar", "root ::= \"a\""}}}});
  EXPECT_EQ(s.grammar(), "root ::= \"a\"");
  std::tie(s, param) = kind({{"structured_outputs", {{"json_object", true}}}});
  EXPECT_EQ(s.structured_output_case(), v1::SamplingParams::kJsonObject);
  std::tie(s, param) = kind({{"guided_json", kSchema}});
  EXPECT_EQ(json::parse(s.json_schema()), kSchema);
  EXPECT_EQ(param, "guided_json");
  std::tie(s, param) = kind({{"guided_regex", "\\d+"}});
  EXPECT_EQ(s.regex(), "\\d+");
  std::tie(s, param) = kind({{"guided_choice", {"x"}}});
  EXPECT_EQ(s.choice().choices(0), "x");
  std::tie(s, param) = kind({{"guided_grammar", "root ::= [0-9]+"}});
  EXPECT_EQ(s.grammar(), "root ::= [0-9]+");
  std::tie(s, param) = kind({{"json_schema", kSchema}});
  EXPECT_EQ(json::parse(s.json_schema()), kSchema);
  EXPECT_EQ(param, "json_schema");
  std::tie(s, param) = kind({{"grammar", "root ::= \"b\""}});
  EXPECT_EQ(s.grammar(), "root ::= \"b\"");
  EXPECT_EQ(param, "grammar");
  // Null is "not given", as everywhere in OpenAI's API.
  std::tie(s, param) = kind({{"grammar", nullptr}, {"structured_outputs", {{"regex", nullptr}}}});
  EXPECT_EQ(s.structured_output_case(), v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET);
}

TEST(GatewayStructuredOutput, MalformedFieldsAre400sNamingThem) {
  struct Case {
    json fields;
    std::string param;
    std::string words;
  };
  const std::vector<Case> cases = {
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format",
       "response_format.json_schema must be an object"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}},
       "response_format", "response_format.json_schema.schema is required"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"schema", 5}}}}}},
       "response_format", "must be a JSON Schema"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"schema", kSchema}, {"strict", "yes"}}}}}},
       "response_format", "strict must be true or false"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"schema", kSchema}, {"extra", 1}}}}}},
       "response_format", "response_format.json_schema.extra is not supported"},
      {{{"response_format", {{"type", "structural_tag"}}}}, "response_format",
       "'structural_tag' is not supported"},
      {{{"response_format", {{"type", 5}}}}, "response_format", "response_format must be"},
      {{{"response_format", "json"}}, "response_format", "response_format must be"},
      {{{"response_format", {{"type", "json_object"}, {"schema", kSchema}}}}, "response_format",
       "response_format.schema is not supported"},
      {{{"structured_outputs", "x"}}, "structured_outputs", "must be an object"},
      {{{"structured_outputs", {{"structural_tag", "x"}}}}, "structured_outputs",
       "structured_outputs.structural_tag is not supported"},
      {{{"structured_outputs", {{"regex", "a"}, {"choice", {"b"}}}}}, "structured_outputs",
       "structured_outputs sets more than one"},
      {{{"structured_outputs", {{"choice", json::array()}}}}, "structured_outputs",
       "non-empty list of strings"},
      {{{"structured_outputs", {{"choice", {1, 2}}}}}, "structured_outputs",
       "non-empty list of strings"},
      {{{"structured_outputs", {{"json_object", "yes"}}}}, "structured_outputs",
       "true or false"},
      {{{"guided_regex", 5}}, "guided_regex", "guided_regex must be a string"},
      {{{"guided_grammar", ""}}, "guided_grammar", "non-empty string"},
      {{{"grammar", "root ::= \"a\""}, {"json_schema", kSchema}}, "grammar",
       "json_schema and grammar both set one"},
      {{{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}, "guided_regex",
       "response_format and guided_regex both set one"},
      {{{"guided_decoding_backend", "xgrammar"}}, "guided_decoding_backend",
       "Unrecognized request argument"},
  };
  for (const Case& c : cases) {
    const HttpError error = ParseError(Chat(c.fields));
    EXPECT_EQ(error.status, 400) << c.fields.dump();
    EXPECT_EQ(error.param, c.param) << c.fields.dump() << ": " << error.message;
    EXPECT_NE(error.message.find(c.words), std::string::npos)
        << c.fields.dump() << ": " << error.message;
  }
}

TEST(GatewayStructuredOutput, SchemaTextKeepsTheWrittenOrderOfProperties) {
  const std::string text = R"({"zeta": 1, "response_format": {"type": "json_schema",
      "json_schema": {"name": "n", "schema": {"type": "object", "properties":
      {"reasoning": {"type": "string"}, "answer": {"type": "integer"}}}}},
      "guided_json": {"properties": {"b": {}, "a": {}}}, "structured_outputs": {"json": "x"}})";
  nlohmann::ordered_json body;
  ASSERT_FALSE(ParseRequestBody(text, body).has_value());
  EXPECT_EQ(OrderedSchemaText(body, "response_format"),
            R"({"type":"object","properties":{"reasoning":{"type":"string"},)"
            R"("answer":{"type":"integer"}}})");
  EXPECT_EQ(OrderedSchemaText(body, "guided_json"), R"({"properties":{"b":{},"a":{}}})");
  // A schema sent as a string is passed on as it is already.
  EXPECT_EQ(OrderedSchemaText(body, "structured_outputs"), std::nullopt);
  EXPECT_EQ(OrderedSchemaText(body, "grammar"), std::nullopt);
}

}  // namespace
}  // namespace tokenmill::gateway
