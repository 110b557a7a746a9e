#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_nesting.h"
#include "grammar/gbnf_writer.h"
#include "grammar/number_range.h"
#include "grammar/regex.h"

namespace tokenmill::grammar {
namespace {

// Ordered: properties are written in the schema's order.
using Json = nlohmann::ordered_json;

constexpr const char* kItemSeparator = "\", \"";
constexpr const char* kKeySeparator = "\": \"";

// The primitives every converted grammar may use; only those referenced are emitted.
const std::map<std::string, std::string>& Primitives() {
  static const auto* primitives = new std::map<std::string, std::string>{
      {"json-char", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
      {"json-string", R"("\"" json-char* "\"")"},
      {"json-int", R"("0" | [1-9] [0-9]{0,15})"},
      {"json-integer", R"("-"? json-int)"},
      {"json-fraction", R"("." [0-9]{1,16})"},
      {"json-exponent", R"([eE] [-+]? [0-9]{1,16})"},
      {"json-number", R"("-"? json-int json-fraction? json-exponent?)"},
      {"json-boolean", R"("true" | "false")"},
      {"json-null", R"("null")"},
      {"json-value",
       R"(json-object | json-array | json-string | json-number | json-boolean | json-null)"},
      {"json-member", R"(json-string ": " json-value)"},
      {"json-object", R"("{" (json-member (", " json-member)*)? "}")"},
      {"json-array", R"("[" (json-value (", " json-value)*)? "]")"},
  };
  return *primitives;
}

// What each primitive refers to, so referencing one emits its dependencies.
const std::map<std::string, std::vector<std::string>>& PrimitiveDeps() {
  static const auto* deps = new std::map<std::string, std::vector<std::string>>{
      {"json-string", {"json-char"}},
      {"json-integer", {"json-int"}},
      {"json-number", {"json-int", "json-fraction", "json-exponent"}},
      {"json-value",
       {"json-object", "json-array", "json-string", "json-number", "json-boolean", "json-null"}},
      {"json-member", {"json-string", "json-value"}},
      {"json-object", {"json-member"}},
      {"json-array", {"json-value"}},
  };
  return *deps;
}

// Keywords that only describe (they never constrain an instance).
const std::set<std::string>& Annotations() {
  static const auto* keys = new std::set<std::string>{
      "title",    "description", "examples",  "default",   "$comment", "$schema",
      "$id",      "deprecated",  "readOnly",  "writeOnly", "$defs",    "definitions",
      "strict",   "discriminator", "contentMediaType", "contentEncoding", "$anchor"};
  return *keys;
}

const std::map<std::string, std::string>& FormatPatterns() {
  static const auto* formats = new std::map<std::string, std::string>{
      {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
      {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"date-time",
       R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"email", R"([a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)+)"},
      {"ipv4",
       R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
  };
  return *formats;
}

std::string Alternatives(const std::vector<std::string>& alternatives) {
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + ")";
}

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const GrammarLimits& limits) : root_(root), limits_(limits) {}

  StatusOr<std::string> Convert() {
    TM_ASSIGN_OR_RETURN(std::string root_expr, Visit(root_, "", 0));
    std::string out = "root ::= " + root_expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    for (const std::string& name : primitives_used_) {
      out += name + " ::= " + Primitives().at(name) + "\n";
    }
    return out;
  }

 private:
  static Status Error(const std::string& path, const std::string& what) {
    return InvalidArgumentError("JSON Schema at " + (path.empty() ? "/" : path) + ": " + what);
  }

  std::string Primitive(const std::string& name) {
    if (primitives_used_.insert(name).second) {
      const auto deps = PrimitiveDeps().find(name);
      if (deps != PrimitiveDeps().end()) {
        for (const std::string& dep : deps->second) Primitive(dep);
      }
    }
    return name;
  }

  std::string NewRule(const std::string& hint, std::string body) {
    const std::string name = hint + "-" + std::to_string(rules_.size());
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  Status CheckBound(const std::string& path, const char* keyword, int64_t value) const {
    if (value > limits_.max_repetition) {
      return ResourceExhaustedError(
          "JSON Schema at " + path + ": " + keyword + " " + std::to_string(value) +
          " is over the limit of " + std::to_string(limits_.max_repetition) +
          CapHint(std::string("use a smaller ") + keyword, "--grammar-max-repetition"));
    }
    return OkStatus();
  }

  StatusOr<std::optional<int64_t>> Count(const Json& schema, const std::string& path,
                                         const char* keyword) const {
    if (!schema.contains(keyword)) return std::optional<int64_t>();
    const Json& v = schema[keyword];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(path + "/" + keyword, "must be a non-negative integer");
    }
    TM_RETURN_IF_ERROR(CheckBound(path + "/" + keyword, keyword, v.get<int64_t>()));
    return std::optional<int64_t>(v.get<int64_t>());
  }

  StatusOr<std::string> Visit(const Json& schema, const std::string& path, int depth) {
    if (depth > limits_.max_schema_depth) {
      return ResourceExhaustedError("JSON Schema at " + path + ": nested deeper than " +
                                    std::to_string(limits_.max_schema_depth) +
                                    " subschemas or $refs" +
                                    CapHint("flatten the schema", "--grammar-max-schema-depth"));
    }
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return Primitive("json-value");
      return Error(path, "the schema false allows no value");
    }
    if (!schema.is_object()) return Error(path, "a schema must be an object or a boolean");
    if (schema.empty()) return Primitive("json-value");

    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "enum", "const", "items",
        "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf",
        "allOf", "$ref", "nullable"};
    for (const auto& [key, value] : schema.items()) {
      if (!kKnown.count(key) && !Annotations().count(key)) {
        return Error(path, "unsupported keyword '" + key + "'");
      }
    }
    if (schema.contains("nullable") && !schema["nullable"].is_boolean()) {
      return Error(path + "/nullable", "must be true or false");
    }
    if (schema.contains("nullable") && schema["nullable"] == true) {
      Json rest = schema;
      rest.erase("nullable");
      TM_ASSIGN_OR_RETURN(std::string inner, Visit(rest, path, depth + 1));
      return "(" + inner + " | " + Primitive("json-null") + ")";
    }
    if (schema.contains("$ref")) return VisitRef(schema, path, depth);
    if (schema.contains("const")) return GbnfLiteral(schema["const"].dump());
    if (schema.contains("enum")) {
      const Json& values = schema["enum"];
      if (!values.is_array() || values.empty()) {
        return Error(path + "/enum", "must be a non-empty array");
      }
      std::vector<std::string> alternatives;
      for (const Json& v : values) alternatives.push_back(GbnfLiteral(v.dump()));
      return Alternatives(alternatives);
    }
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!schema.contains(keyword)) continue;
      const Json& branches = schema[keyword];
      if (!branches.is_array() || branches.empty()) {
        return Error(path + "/" + keyword, "must be a non-empty array");
      }
      std::vector<std::string> alternatives;
      for (size_t i = 0; i < branches.size(); ++i) {
        TM_ASSIGN_OR_RETURN(std::string alt, Visit(Merged(schema, keyword, branches[i]),
                                                   path + "/" + keyword + "/" + std::to_string(i),
                                                   depth + 1));
        alternatives.push_back(alt);
      }
      return Alternatives(alternatives);
    }
    if (schema.contains("allOf")) {
      const Json& parts = schema["allOf"];
      if (!parts.is_array() || parts.size() != 1) {
        return Error(path + "/allOf", "only an allOf of one schema is supported");
      }
      return Visit(Merged(schema, "allOf", parts[0]), path + "/allOf/0", depth + 1);
    }
    return VisitTyped(schema, path, depth);
  }

  // The sibling keywords of `keyword` apply to its subschema too (e.g. a description beside
  // anyOf, or a type beside allOf).
  static Json Merged(const Json& schema, const char* keyword, const Json& sub) {
    if (!sub.is_object()) return sub;
    Json merged = sub;
    for (const auto& [key, value] : schema.items()) {
      if (key != keyword && !merged.contains(key) && !Annotations().count(key)) {
        merged[key] = value;
      }
    }
    return merged;
  }

  StatusOr<std::string> VisitRef(const Json& schema, const std::string& path, int depth) {
    if (!schema["$ref"].is_string()) return Error(path + "/$ref", "must be a string");
    const std::string ref = schema["$ref"].get<std::string>();
    if (ref.empty() || ref[0] != '#') {
      return Error(path + "/$ref", "only references into this document (#...) are supported");
    }
    const auto known = ref_rules_.find(ref);
    if (known != ref_rules_.end()) return known->second;
    const Json* target = nullptr;
    try {
      const Json::json_pointer pointer(ref.substr(1));
      if (root_.contains(pointer)) target = &root_.at(pointer);
    } catch (const Json::exception&) {
    }
    if (target == nullptr) return Error(path + "/$ref", "'" + ref + "' does not resolve");
    // Named before visiting, so recursive schemas refer to themselves.
    const std::string name = "ref-" + std::to_string(ref_rules_.size());
    ref_rules_[ref] = name;
    const size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    TM_ASSIGN_OR_RETURN(std::string body, Visit(*target, ref.substr(1), depth + 1));
    rules_[slot].second = body;
    if (schema.size() > 1) {
      Json rest = schema;
      rest.erase("$ref");
      bool constrains = false;
      for (const auto& [key, value] : rest.items()) constrains |= !Annotations().count(key);
      if (constrains) return Error(path, "keywords beside $ref are not supported");
    }
    return name;
  }

  StatusOr<std::string> VisitTyped(const Json& schema, const std::string& path, int depth) {
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& each : t) {
          if (!each.is_string()) return Error(path + "/type", "must name types");
          types.push_back(each.get<std::string>());
        }
      } else {
        return Error(path + "/type", "must be a string or an array of strings");
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties") ||
               schema.contains("required")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("prefixItems")) {
      types.push_back("array");
    } else if (schema.contains("minLength") || schema.contains("maxLength") ||
               schema.contains("pattern") || schema.contains("format")) {
      types.push_back("string");
    } else if (schema.contains("minimum") || schema.contains("maximum") ||
               schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum")) {
      types.push_back("number");
    } else {
      return Primitive("json-value");
    }
    std::vector<std::string> alternatives;
    for (const std::string& type : types) {
      TM_ASSIGN_OR_RETURN(std::string alt, VisitType(type, schema, path, depth));
      alternatives.push_back(alt);
    }
    return alternatives.size() == 1 ? alternatives[0] : Alternatives(alternatives);
  }

  StatusOr<std::string> VisitType(const std::string& type, const Json& schema,
                                  const std::string& path, int depth) {
    if (type == "string") return VisitString(schema, path);
    if (type == "integer" || type == "number") return VisitNumber(type == "integer", schema, path);
    if (type == "boolean") return Primitive("json-boolean");
    if (type == "null") return Primitive("json-null");
    if (type == "object") return VisitObject(schema, path, depth);
    if (type == "array") return VisitArray(schema, path, depth);
    return Error(path + "/type", "unknown type '" + type + "'");
  }

  StatusOr<std::string> VisitString(const Json& schema, const std::string& path) {
    TM_ASSIGN_OR_RETURN(std::optional<int64_t> min_length, Count(schema, path, "minLength"));
    TM_ASSIGN_OR_RETURN(std::optional<int64_t> max_length, Count(schema, path, "maxLength"));
    std::optional<std::string> pattern;
    std::string pattern_path = path + "/pattern";
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) return Error(pattern_path, "must be a string");
      pattern = schema["pattern"].get<std::string>();
    } else if (schema.contains("format") && schema["format"].is_string()) {
      const auto format = FormatPatterns().find(schema["format"].get<std::string>());
      // Other formats are annotations (as validators treat them by default).
      if (format != FormatPatterns().end()) {
        pattern = format->second;
        pattern_path = path + "/format";
      }
    }
    if (pattern) {
      if (min_length || max_length) {
        return Error(path, "minLength/maxLength together with pattern or format are not supported");
      }
      StatusOr<std::string> expr = RegexToGbnfExpression(*pattern, /*json_string=*/true, limits_);
      if (!expr.ok()) {
        return Status(expr.status().code(),
                      "JSON Schema at " + pattern_path + ": " + expr.status().message());
      }
      return "\"\\\"\" " + *expr + " \"\\\"\"";
    }
    if (!min_length && !max_length) return Primitive("json-string");
    const int64_t lo = min_length.value_or(0);
    if (max_length && *max_length < lo) return Error(path, "maxLength is below minLength");
    Primitive("json-char");
    const std::string bound = GbnfRepetition(lo, max_length);
    return "\"\\\"\" json-char" + bound + " \"\\\"\"";
  }

  StatusOr<std::string> VisitNumber(bool integer, const Json& schema, const std::string& path) {
    // Bounds as (value, exclusive); draft 4's boolean exclusiveMinimum/Maximum too.
    std::optional<double> lo, hi;
    bool lo_exclusive = false, hi_exclusive = false;
    for (const char* keyword : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!schema.contains(keyword)) continue;
      const Json& v = schema[keyword];
      const std::string key = keyword;
      const bool is_min = key.find("inimum") != std::string::npos;
      if (v.is_boolean()) {
        (is_min ? lo_exclusive : hi_exclusive) = v.get<bool>();
        continue;
      }
      if (!v.is_number()) return Error(path + "/" + key, "must be a number");
      const double value = v.get<double>();
      const bool exclusive = key.rfind("exclusive", 0) == 0;
      std::optional<double>& bound = is_min ? lo : hi;
      bool& bound_exclusive = is_min ? lo_exclusive : hi_exclusive;
      if (!bound || (is_min ? value >= *bound : value <= *bound)) {
        bound = value;
        if (exclusive) bound_exclusive = true;
      }
    }
    if (!lo && !hi) return Primitive(integer ? "json-integer" : "json-number");
    constexpr double kLimit = 9e15;
    const auto clamp = [&](double v) { return std::max(-kLimit, std::min(kLimit, v)); };
    // Integers: [lo', hi'].
    std::optional<int64_t> int_lo, int_hi;
    if (lo) {
      const double v = clamp(*lo);
      int_lo = static_cast<int64_t>(lo_exclusive ? std::floor(v) + 1 : std::ceil(v));
    }
    if (hi) {
      const double v = clamp(*hi);
      int_hi = static_cast<int64_t>(hi_exclusive ? std::ceil(v) - 1 : std::floor(v));
    }
    std::vector<std::string> alternatives;
    const std::string ints = IntegerRangeGbnf(int_lo, int_hi);
    if (!ints.empty()) alternatives.push_back(ints);
    if (!integer) {
      // A fraction that ends in a non-zero digit is strictly between two integers, so
      // I.f lies in (I, I+1) and -J.f in (-J-1, -J).
      const std::string fraction = " \".\" [0-9]{0,15} [1-9]";
      std::optional<int64_t> pos_lo = std::max<int64_t>(0, lo ? static_cast<int64_t>(std::ceil(clamp(*lo))) : 0);
      std::optional<int64_t> pos_hi;
      if (hi) pos_hi = static_cast<int64_t>(std::floor(clamp(*hi))) - 1;
      const std::string positive = IntegerRangeGbnf(pos_lo, pos_hi);
      if (!positive.empty()) alternatives.push_back(positive + fraction);
      std::optional<int64_t> neg_lo = std::max<int64_t>(0, hi ? static_cast<int64_t>(std::ceil(-clamp(*hi))) : 0);
      std::optional<int64_t> neg_hi;
      if (lo) neg_hi = static_cast<int64_t>(std::floor(-clamp(*lo))) - 1;
      const std::string negative = IntegerRangeGbnf(neg_lo, neg_hi);
      if (!negative.empty()) alternatives.push_back("\"-\" " + negative + fraction);
    }
    if (alternatives.empty()) return Error(path, "the bounds leave no value");
    return NewRule(integer ? "integer" : "number", Alternatives(alternatives));
  }

  StatusOr<std::string> VisitObject(const Json& schema, const std::string& path, int depth) {
    struct Property {
      std::string member;  // "\"name\": " value
      bool required;
    };
    std::vector<Property> properties;
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) return Error(path + "/required", "must be an array");
      for (const Json& name : schema["required"]) {
        if (!name.is_string()) return Error(path + "/required", "must list property names");
        required.insert(name.get<std::string>());
      }
    }
    std::set<std::string> declared;
    if (schema.contains("properties")) {
      const Json& props = schema["properties"];
      if (!props.is_object()) return Error(path + "/properties", "must be an object");
      for (const auto& [name, sub] : props.items()) {
        TM_ASSIGN_OR_RETURN(std::string value,
                            Visit(sub, path + "/properties/" + name, depth + 1));
        properties.push_back({GbnfLiteral(Json(name).dump() + ": ") + " " + value,
                              required.count(name) > 0});
        declared.insert(name);
      }
    }
    for (const std::string& name : required) {
      if (!declared.count(name)) {
        properties.push_back({GbnfLiteral(Json(name).dump() + ": ") + " " + Primitive("json-value"),
                              true});
      }
    }
    // Absent additionalProperties means none (OpenAI's strict mode, xgrammar's default).
    std::optional<std::string> additional;
    if (schema.contains("additionalProperties")) {
      const Json& extra = schema["additionalProperties"];
      if (extra.is_boolean()) {
        if (extra.get<bool>()) additional = Primitive("json-value");
      } else {
        TM_ASSIGN_OR_RETURN(std::string value,
                            Visit(extra, path + "/additionalProperties", depth + 1));
        additional = value;
      }
    }
    std::optional<std::string> extra_member;
    if (additional) {
      extra_member = Primitive("json-string") + " \": \" " + *additional;
    }
    // rest[i]: properties i.. after one was written (each with its leading comma).
    const size_t n = properties.size();
    std::vector<std::string> rest(n + 1);
    rest[n] = extra_member ? "(\", \" " + *extra_member + ")*" : "";
    for (size_t i = n; i-- > 0;) {
      const std::string item = "\", \" " + properties[i].member;
      rest[i] = (properties[i].required ? item : "(" + item + ")?") +
                (rest[i + 1].empty() ? "" : " " + rest[i + 1]);
    }
    // The first property written is one of the optional ones before the first required one,
    // or that one; with none required, the object may also be empty or start with an extra.
    std::vector<std::string> first;
    size_t i = 0;
    for (; i < n; ++i) {
      first.push_back(properties[i].member + (rest[i + 1].empty() ? "" : " " + rest[i + 1]));
      if (properties[i].required) break;
    }
    if (i == n) {
      if (extra_member) first.push_back(*extra_member + " " + rest[n]);
      first.push_back("\"\"");
    }
    const std::string members = first.size() == 1 ? first[0] : Alternatives(first);
    return NewRule("object", "\"{\" " + members + " \"}\"");
  }

  StatusOr<std::string> VisitArray(const Json& schema, const std::string& path, int depth) {
    TM_ASSIGN_OR_RETURN(std::optional<int64_t> min_items, Count(schema, path, "minItems"));
    TM_ASSIGN_OR_RETURN(std::optional<int64_t> max_items, Count(schema, path, "maxItems"));
    std::vector<std::string> prefix;
    if (schema.contains("prefixItems")) {
      const Json& items = schema["prefixItems"];
      if (!items.is_array()) return Error(path + "/prefixItems", "must be an array");
      for (size_t i = 0; i < items.size(); ++i) {
        TM_ASSIGN_OR_RETURN(std::string item,
                            Visit(items[i], path + "/prefixItems/" + std::to_string(i), depth + 1));
        prefix.push_back(item);
      }
    }
    std::optional<std::string> item;  // the items after the prefix; none when items is false
    if (!schema.contains("items")) {
      if (prefix.empty()) item = Primitive("json-value");
    } else if (schema["items"].is_boolean()) {
      if (schema["items"].get<bool>()) item = Primitive("json-value");
    } else {
      TM_ASSIGN_OR_RETURN(std::string each, Visit(schema["items"], path + "/items", depth + 1));
      item = each;
    }
    const int64_t lo = min_items.value_or(0);
    const int64_t n_prefix = static_cast<int64_t>(prefix.size());
    if (max_items && *max_items < lo) return Error(path, "maxItems is below minItems");
    if (!item && max_items && *max_items < n_prefix) {
      return Error(path, "maxItems is below the number of prefixItems");
    }
    if (!item && lo > n_prefix) return Error(path, "minItems asks for more items than allowed");
    // The prefix items are written in full; then lo..max further items.
    std::string body;
    for (int64_t i = 0; i < n_prefix; ++i) body += (i ? " \", \" " : "") + prefix[i];
    if (item) {
      const int64_t more_lo = std::max<int64_t>(0, lo - n_prefix);
      const std::optional<int64_t> more_hi =
          max_items ? std::optional<int64_t>(std::max<int64_t>(0, *max_items - n_prefix))
                    : std::nullopt;
      if (!more_hi || *more_hi > 0) {
        if (n_prefix > 0) {
          body += " (\", \" " + *item + ")" + GbnfRepetition(more_lo, more_hi);
        } else if (more_lo > 0) {
          body = *item + " (\", \" " + *item + ")" +
                 GbnfRepetition(more_lo - 1, more_hi ? std::optional<int64_t>(*more_hi - 1) : std::nullopt);
        } else {
          const std::string tail =
              more_hi ? GbnfRepetition(0, *more_hi - 1) : std::string("*");
          body = "(" + *item + " (\", \" " + *item + ")" + tail + ")?";
        }
      }
    }
    return NewRule("array", "\"[\" " + body + " \"]\"");
  }

  const Json& root_;
  const GrammarLimits& limits_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> ref_rules_;
  std::set<std::string> primitives_used_;
};

}  // namespace

StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, const GrammarLimits& limits) {
  // Parsing is iterative, but printing a const, copying a subschema and converting recurse on
  // the schema's nesting: bounded first, as all JSON from clients is (common/json_nesting.h).
  if (JsonTextNestsDeeperThan(schema_json)) {
    return InvalidArgumentError(JsonNestingRefusal("JSON Schema"));
  }
  Json schema;
  try {
    schema = Json::parse(schema_json);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    return InvalidArgumentError(std::string("JSON Schema is not valid JSON: ") + e.what());
  }
  try {
    return SchemaConverter(schema, limits).Convert();
  } catch (const Json::exception& e) {  // a value of another type than a check expected
    return InvalidArgumentError(std::string("JSON Schema: ") + e.what());
  }
}

std::string JsonObjectGbnf() {
  std::string out = "root ::= json-object\n";
  for (const auto& [name, body] : Primitives()) {
    if (name != "json-integer") out += name + " ::= " + body + "\n";
  }
  return out;
}

}  // namespace tokenmill::grammar
