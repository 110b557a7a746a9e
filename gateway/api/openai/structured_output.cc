#include "gateway/api/openai/structured_output.h"

#include <vector>

#include "gateway/http/request_body.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

// One constraint as a request states it, before it is known to be the only one.
struct Constraint {
  std::string param;  // the top-level field it came in
  v1::SamplingParams fields;  // only structured_output set
};

const json* Field(const json& object, std::string_view name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<HttpError> RefuseOtherKeys(const json& object, const std::string& where,
                                         const std::set<std::string_view>& known,
                                         const std::string& param) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0 && !value.is_null()) {
      std::string names;
      for (const std::string_view name : known) names += (names.empty() ? "" : ", ") +
                                                          std::string(name);
      return BadRequest(where + "." + key + " is not supported (only " + names + ")", param);
    }
  }
  return std::nullopt;
}

// A JSON Schema: an object or a boolean, or (as vLLM accepts it) a string of JSON, which is
// passed on as it is for the server's parser to judge.
std::optional<HttpError> Schema(const json& value, const std::string& where,
                                const std::string& param, v1::SamplingParams& out) {
  if (value.is_string()) {
    out.set_json_schema(value.get<std::string>());
  } else if (value.is_object() || value.is_boolean()) {
    out.set_json_schema(value.dump());
  } else {
    return BadRequest(where + " must be a JSON Schema: an object (or a boolean)", param);
  }
  return std::nullopt;
}

std::optional<HttpError> Text(const json& value, const std::string& where,
                              const std::string& param, bool allow_empty, std::string& out) {
  if (!value.is_string() || (!allow_empty && value.get_ref<const std::string&>().empty())) {
    return BadRequest(where + (allow_empty ? " must be a string" : " must be a non-empty string"),
                      param);
  }
  out = value.get<std::string>();
  return std::nullopt;
}

std::optional<HttpError> Choices(const json& value, const std::string& where,
                                 const std::string& param, v1::SamplingParams& out) {
  if (!value.is_array() || value.empty()) {
    return BadRequest(where + " must be a non-empty list of strings", param);
  }
  v1::Choice& choice = *out.mutable_choice();
  for (const json& item : value) {
    if (!item.is_string()) return BadRequest(where + " must be a non-empty list of strings", param);
    choice.add_choices(item.get<std::string>());
  }
  return std::nullopt;
}

std::optional<HttpError> Regex(const json& value, const std::string& where,
                               const std::string& param, v1::SamplingParams& out) {
  std::string text;
  if (auto error = Text(value, where, param, /*allow_empty=*/true, text)) return error;
  out.set_regex(std::move(text));
  return std::nullopt;
}

std::optional<HttpError> Grammar(const json& value, const std::string& where,
                                 const std::string& param, v1::SamplingParams& out) {
  std::string text;
  if (auto error = Text(value, where, param, /*allow_empty=*/false, text)) return error;
  out.set_grammar(std::move(text));
  return std::nullopt;
}

void AddJsonObject(const std::string& param, std::vector<Constraint>& out) {
  out.push_back({param, {}});
  out.back().fields.mutable_json_object();
}

// OpenAI: {"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema, ...}}.
std::optional<HttpError> ResponseFormat(const json& format, std::vector<Constraint>& out) {
  const std::string param = "response_format";
  const auto type = format.is_object() ? format.find("type") : format.end();
  if (!format.is_object() || type == format.end() || !type->is_string()) {
    return BadRequest("response_format must be {\"type\": \"text\" | \"json_object\" | "
                      "\"json_schema\", ...}",
                      param);
  }
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text" || name == "json_object") {
    if (auto error = RefuseOtherKeys(format, param, {"type"}, param)) return error;
    if (name == "json_object") AddJsonObject(param, out);
    return std::nullopt;
  }
  if (name != "json_schema") {
    return BadRequest("response_format.type '" + name +
                          "' is not supported: use text, json_object or json_schema",
                      param);
  }
  if (auto error = RefuseOtherKeys(format, param, {"type", "json_schema"}, param)) return error;
  const json* spec = Field(format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return BadRequest("response_format.json_schema must be an object {name, schema, strict}",
                      param);
  }
  const std::string where = "response_format.json_schema";
  if (auto error = RefuseOtherKeys(*spec, where, {"name", "description", "schema", "strict"},
                                   param)) {
    return error;
  }
  for (const char* key : {"name", "description"}) {
    if (const json* v = Field(*spec, key); v != nullptr && !v->is_string()) {
      return BadRequest(where + "." + key + " must be a string", param);
    }
  }
  // strict: true or false, the schema is enforced either way.
  if (const json* strict = Field(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    return BadRequest(where + ".strict must be true or false", param);
  }
  const json* schema = Field(*spec, "schema");
  if (schema == nullptr) return BadRequest(where + ".schema is required", param);
  out.push_back({param, {}});
  return Schema(*schema, where + ".schema", param, out.back().fields);
}

// vLLM: {"json" | "regex" | "choice" | "grammar" | "json_object": ...}, one of them.
std::optional<HttpError> StructuredOutputs(const json& spec, std::vector<Constraint>& out) {
  const std::string param = "structured_outputs";
  if (!spec.is_object()) return BadRequest("structured_outputs must be an object", param);
  if (auto error = RefuseOtherKeys(spec, param,
                                   {"json", "regex", "choice", "grammar", "json_object"}, param)) {
    return error;
  }
  for (const auto& [key, value] : spec.items()) {
    if (value.is_null()) continue;
    const std::string where = param + "." + key;
    if (key == "json_object") {
      if (!value.is_boolean()) return BadRequest(where + " must be true or false", param);
      if (value.get<bool>()) AddJsonObject(param, out);
      continue;
    }
    out.push_back({param, {}});
    v1::SamplingParams& fields = out.back().fields;
    std::optional<HttpError> error;
    if (key == "json") error = Schema(value, where, param, fields);
    if (key == "regex") error = Regex(value, where, param, fields);
    if (key == "choice") error = Choices(value, where, param, fields);
    if (key == "grammar") error = Grammar(value, where, param, fields);
    if (error) return error;
  }
  return std::nullopt;
}

}  // namespace

const std::set<std::string_view>& StructuredOutputParams() {
  static const std::set<std::string_view> kParams = {
      "response_format", "structured_outputs", "guided_json", "guided_regex",
      "guided_choice",   "guided_grammar",     "json_schema", "grammar"};
  return kParams;
}

std::optional<HttpError> ParseStructuredOutput(const json& body, v1::SamplingParams& s,
                                               std::string& param) {
  std::vector<Constraint> found;
  if (const json* format = Field(body, "response_format")) {
    if (auto error = ResponseFormat(*format, found)) return error;
  }
  if (const json* spec = Field(body, "structured_outputs")) {
    if (auto error = StructuredOutputs(*spec, found)) return error;
  }
  // vLLM's older fields and llama-server's, one value each.
  using Parse = std::optional<HttpError> (*)(const json&, const std::string&, const std::string&,
                                             v1::SamplingParams&);
  const std::pair<const char*, Parse> kSingle[] = {
      {"guided_json", Schema},     {"guided_regex", Regex}, {"guided_choice", Choices},
      {"guided_grammar", Grammar}, {"json_schema", Schema}, {"grammar", Grammar}};
  for (const auto& [name, parse] : kSingle) {
    const json* value = Field(body, name);
    if (value == nullptr) continue;
    found.push_back({name, {}});
    if (auto error = parse(*value, name, name, found.back().fields)) return error;
  }
  if (found.size() > 1) {
    const std::string both = found[0].param == found[1].param
                                 ? found[0].param + " sets more than one"
                                 : found[0].param + " and " + found[1].param + " both set one";
    return BadRequest("give one structured-output constraint per request: " + both,
                      found[1].param);
  }
  param.clear();
  if (found.empty()) return std::nullopt;
  s.MergeFrom(found[0].fields);
  param = found[0].param;
  return std::nullopt;
}

std::optional<std::string> OrderedSchemaText(const nlohmann::ordered_json& body,
                                             const std::string& param) {
  const auto at = [](const nlohmann::ordered_json& object,
                     const char* key) -> const nlohmann::ordered_json* {
    if (!object.is_object()) return nullptr;
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  };
  const nlohmann::ordered_json* schema = at(body, param.c_str());
  if (schema != nullptr && param == "response_format") {
    schema = at(*schema, "json_schema");
    if (schema != nullptr) schema = at(*schema, "schema");
  } else if (schema != nullptr && param == "structured_outputs") {
    schema = at(*schema, "json");
  }
  if (schema == nullptr || !schema->is_object()) return std::nullopt;
  return schema->dump();
}

void KeepSchemaOrder(std::string_view body, std::initializer_list<const char*> path,
                     v1::SamplingParams& sampling) {
  if (!sampling.has_json_schema()) return;
  nlohmann::ordered_json ordered;
  if (ParseRequestBody(body, ordered)) return;  // parsed once already: cannot fail
  const nlohmann::ordered_json* value = &ordered;
  for (const char* key : path) {
    if (!value->is_object()) return;
    const auto it = value->find(key);
    if (it == value->end()) return;
    value = &*it;
  }
  if (value->is_object()) sampling.set_json_schema(value->dump());
}

}  // namespace tokenmill::gateway
