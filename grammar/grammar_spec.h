// What a request asks the output to follow: a grammar in one of the forms clients send.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tokenmill::grammar {

struct GrammarSpec {
  enum class Kind { kGbnf, kJsonSchema, kJsonObject, kRegex, kChoice };
  Kind kind = Kind::kGbnf;
  // GBNF source (llama.cpp's syntax, root rule `root`), JSON Schema (JSON text) or a regex
  // (the whole output must match it). Unused for kJsonObject and kChoice.
  std::string text;
  // kChoice: the output is exactly one of these strings.
  std::vector<std::string> choices;
};

// "gbnf", "json_schema", "json_object", "regex", "choice".
std::string_view GrammarKindName(GrammarSpec::Kind kind);

}  // namespace tokenmill::grammar
