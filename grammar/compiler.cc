#include "grammar/compiler.h"

#include <utility>

#include "grammar/compiled_grammar.h"
#include "grammar/gbnf_parser.h"
#include "grammar/gbnf_writer.h"
#include "grammar/json_schema.h"
#include "grammar/lowering.h"
#include "grammar/regex.h"

namespace tokenmill::grammar {
namespace {

StatusOr<std::string> ChoiceToGbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) return InvalidArgumentError("choice needs at least one string");
  std::string gbnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) gbnf += " | ";
    gbnf += GbnfLiteral(choices[i]);
  }
  return gbnf + "\n";
}

}  // namespace

std::string CapHint(std::string_view change, std::string_view flag) {
  return ": " + std::string(change) + " (or raise the server's " + std::string(flag) + ")";
}

StatusOr<std::string> SpecToGbnf(const GrammarSpec& spec, const GrammarLimits& limits) {
  switch (spec.kind) {
    case GrammarSpec::Kind::kGbnf:
      return spec.text;
    case GrammarSpec::Kind::kJsonSchema:
      return JsonSchemaToGbnf(spec.text, limits);
    case GrammarSpec::Kind::kJsonObject:
      return JsonObjectGbnf();
    case GrammarSpec::Kind::kRegex:
      return RegexToGbnf(spec.text, limits);
    case GrammarSpec::Kind::kChoice:
      return ChoiceToGbnf(spec.choices);
  }
  return InvalidArgumentError("unknown grammar kind");
}

StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(
    const GrammarSpec& spec, std::shared_ptr<const VocabularyIndex> vocab,
    const GrammarLimits& limits) {
  const auto deadline = std::chrono::steady_clock::now() + limits.max_compile_time;
  TM_ASSIGN_OR_RETURN(const std::string gbnf, SpecToGbnf(spec, limits));
  TM_ASSIGN_OR_RETURN(const GbnfGrammar parsed, ParseGbnf(gbnf));
  TM_ASSIGN_OR_RETURN(Automaton automaton, LowerGrammar(parsed, limits));
  return CompiledGrammar::Build(std::move(automaton), std::move(vocab), deadline,
                                limits.max_table_bytes);
}

}  // namespace tokenmill::grammar
