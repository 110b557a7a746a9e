#include "grammar/grammar_spec.h"

namespace tokenmill::grammar {

std::string_view GrammarKindName(GrammarSpec::Kind kind) {
  switch (kind) {
    case GrammarSpec::Kind::kGbnf:
      return "gbnf";
    case GrammarSpec::Kind::kJsonSchema:
      return "json_schema";
    case GrammarSpec::Kind::kJsonObject:
      return "json_object";
    case GrammarSpec::Kind::kRegex:
      return "regex";
    case GrammarSpec::Kind::kChoice:
      return "choice";
  }
  return "unknown";
}

}  // namespace tokenmill::grammar
