// Prints the GBNF that tokenmill compiles for a grammar spec, so tests/reference scripts
// hand xgrammar the same grammar:
//   tokenmill_grammar_gbnf gbnf|json_schema|json_object|regex|choice < text
// (choice: a JSON array of strings on stdin). Exit 1 with the error on stderr.
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/compiler.h"
#include "grammar/grammar_spec.h"

int main(int argc, char** argv) {
  using tokenmill::grammar::GrammarSpec;
  if (argc != 2) {
    std::cerr << "usage: tokenmill_grammar_gbnf gbnf|json_schema|json_object|regex|choice\n";
    return 2;
  }
  const std::string kind = argv[1];
  const std::string text((std::istreambuf_iterator<char>(std::cin)), {});
  GrammarSpec spec;
  if (kind == "gbnf") {
    spec.kind = GrammarSpec::Kind::kGbnf;
  } else if (kind == "json_schema") {
    spec.kind = GrammarSpec::Kind::kJsonSchema;
  } else if (kind == "json_object") {
    spec.kind = GrammarSpec::Kind::kJsonObject;
  } else if (kind == "regex") {
    spec.kind = GrammarSpec::Kind::kRegex;
  } else if (kind == "choice") {
    spec.kind = GrammarSpec::Kind::kChoice;
    spec.choices = nlohmann::json::parse(text).get<std::vector<std::string>>();
  } else {
    std::cerr << "unknown kind '" << kind << "'\n";
    return 2;
  }
  if (spec.kind != GrammarSpec::Kind::kChoice) spec.text = text;
  const auto gbnf = tokenmill::grammar::SpecToGbnf(spec, tokenmill::grammar::GrammarLimits());
  if (!gbnf.ok()) {
    std::cerr << gbnf.status().ToString() << "\n";
    return 1;
  }
  std::cout << *gbnf;
  return 0;
}
