// JSON Schema converted to GBNF: types, properties / required / additionalProperties (absent
// means false, as in OpenAI's strict mode), enum, const, items / prefixItems, min/maxItems,
// min/maxLength, pattern, integer and number bounds, anyOf / oneOf (as anyOf), a one-element
// allOf, $ref into the document (#, #/$defs/..., #/definitions/...), nullable, a few formats.
// The output is compact JSON (", " and ": " between items, no other whitespace), properties
// in the schema's order. Annotations (title, description, examples, ...) are ignored; any
// other keyword is an error naming it and its path.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "grammar/compiler.h"

namespace tokenmill::grammar {

StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, const GrammarLimits& limits);

// Any JSON object (response_format json_object), in the same compact form.
std::string JsonObjectGbnf();

}  // namespace tokenmill::grammar
