// Compiles a GrammarSpec for one model's vocabulary into an immutable CompiledGrammar: the
// pushdown automaton plus, per grammar position, the tokens whose fate does not depend on the
// stack below it (accepted or rejected outright), so a mask only walks the rest.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "grammar/grammar_spec.h"
#include "grammar/vocabulary.h"

namespace tokenmill::grammar {

// Caps that keep a hostile or careless grammar from taking the server's memory or time:
// compiling past one is an error (RESOURCE_EXHAUSTED naming what the request sent, the limit,
// and the server flag that sets it; server/grpc/server_options.cc).
struct GrammarLimits {
  // Rules after desugaring repetitions, groups and character classes.
  int64_t max_rules = 20000;
  // Grammar elements after desugaring (bounds up to 8 are copies, larger ones a counter).
  int64_t max_elements = 200000;
  // The largest bound of one repetition: GBNF {m,n}, regex {m,n}, JSON Schema maxLength,
  // maxItems, minLength, minItems. A bound costs nothing to compile (a counter): the cap
  // keeps counts small and a 10^6-character string out of a request.
  int64_t max_repetition = 100000;
  // $ref chains and nesting of JSON Schema subschemas.
  int max_schema_depth = 64;
  // Memory of one compiled grammar (CompiledGrammar::memory_bytes): mostly its per-position
  // token tables, at most a vocabulary bitmask or list per position.
  int64_t max_table_bytes = int64_t{256} << 20;
  // Wall time of one compilation, precomputation included.
  std::chrono::milliseconds max_compile_time{20000};
};

class CompiledGrammar;  // grammar/compiled_grammar.h; immutable, shared by every matcher

// INVALID_ARGUMENT naming the keyword and its JSON path / the GBNF line:col / the regex
// offset; RESOURCE_EXHAUSTED over a cap.
StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(
    const GrammarSpec& spec, std::shared_ptr<const VocabularyIndex> vocab,
    const GrammarLimits& limits);

// The end of an error over a cap: ": <change> (or raise the server's <flag>)".
std::string CapHint(std::string_view change, std::string_view flag);

// The GBNF source a spec stands for (what CompileGrammar parses): the converters' output for
// JSON Schema, json_object, regex and choice; the text itself for GBNF.
StatusOr<std::string> SpecToGbnf(const GrammarSpec& spec, const GrammarLimits& limits);

}  // namespace tokenmill::grammar
