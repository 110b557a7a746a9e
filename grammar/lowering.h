// Lowers parsed GBNF to the byte automaton: groups and repetitions become rules (x{m,n} with
// small bounds: m copies, then n-m nested optionals; larger ones a counted kRepeat), character
// classes become UTF-8 byte sequences, and a
// one-byte class under * stays in place as kBytesStar so its rule keeps its scope. Refuses
// undefined rules, a missing root, left recursion, and grammars over the caps.
#pragma once

#include "common/status.h"
#include "grammar/automaton.h"
#include "grammar/compiler.h"
#include "grammar/gbnf_parser.h"

namespace tokenmill::grammar {

StatusOr<Automaton> LowerGrammar(const GbnfGrammar& grammar, const GrammarLimits& limits);

}  // namespace tokenmill::grammar
