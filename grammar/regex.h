// Regular expressions (the common subset of Python's and ECMAScript's syntax: literals,
// escapes, classes, `.`, groups, alternation, greedy or lazy quantifiers, ^ and $ at the ends)
// converted to GBNF. The whole output must match (Python's re.fullmatch); backreferences,
// lookaround, word boundaries and inline flags are refused with their offset.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "grammar/compiler.h"

namespace tokenmill::grammar {

// A grammar whose root matches what the regex fully matches.
StatusOr<std::string> RegexToGbnf(std::string_view regex, const GrammarLimits& limits);

// A GBNF expression for the regex. json_string: the expression matches the text as it
// appears inside a JSON string (quotes and backslashes escaped, control characters left out).
StatusOr<std::string> RegexToGbnfExpression(std::string_view regex, bool json_string,
                                            const GrammarLimits& limits);

}  // namespace tokenmill::grammar
