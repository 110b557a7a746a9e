// The structured-output fields of an OpenAI request body, in each dialect clients send:
// OpenAI's response_format (json_object, json_schema), vLLM's structured_outputs and its older
// guided_json / guided_regex / guided_choice / guided_grammar, and llama-server's json_schema
// and grammar. Each becomes SamplingParams' structured_output oneof. The gateway checks the
// shape only; the server compiles the schema, regex or grammar and names what is wrong in it.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>

#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

// How the server's refusals of a constraint begin ("structured_output.json_schema: ...").
inline constexpr std::string_view kStructuredOutputError = "structured_output";

// The body fields ParseStructuredOutput reads (both endpoints accept them).
const std::set<std::string_view>& StructuredOutputParams();

// Sets s's structured_output from `body`; `param` gets the field that set it (empty: none),
// for naming it in the server's errors. At most one constraint per request: a second one is
// a 400 naming both fields.
std::optional<HttpError> ParseStructuredOutput(const nlohmann::json& body, v1::SamplingParams& s,
                                               std::string& param);

// The JSON Schema that `param` set, as JSON text with its objects in the order the client
// wrote them, from `body` parsed keeping that order (ParseStructuredOutput's input keeps
// none: its objects are sorted). An object's properties are generated in this order, as
// OpenAI does. None when `param` set no schema object.
std::optional<std::string> OrderedSchemaText(const nlohmann::ordered_json& body,
                                             const std::string& param);

// For the APIs that hold a schema at a fixed place (Responses' text.format.schema, Anthropic's
// output_config.format.schema): when `sampling` holds a JSON Schema, it becomes the object at
// `path` of `body` (the request's text) in the order the client wrote it.
void KeepSchemaOrder(std::string_view body, std::initializer_list<const char*> path,
                     v1::SamplingParams& sampling);

}  // namespace tokenmill::gateway
