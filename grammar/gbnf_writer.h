// Helpers for the converters that emit GBNF (JSON Schema, regex, choice).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tokenmill::grammar {

// A GBNF string literal matching exactly `text` (UTF-8), quotes included.
std::string GbnfLiteral(std::string_view text);
// The repetition suffix for lo..hi copies (hi absent: unbounded): "*", "+", "{2,5}", ...
std::string GbnfRepetition(int64_t lo, std::optional<int64_t> hi);
// Code point cp as it may appear inside a GBNF character class.
std::string GbnfClassChar(uint32_t cp);

}  // namespace tokenmill::grammar
