// GBNF text -> parse -> lower -> compile against a small vocabulary: every input either
// compiles or returns an error, within the caps, without crashing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "grammar/compiler.h"
#include "grammar/grammar_spec.h"
#include "tests/fuzz/grammar_fuzz_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tokenmill::grammar;
  static const auto vocab = fuzz::FuzzVocabulary();
  GrammarSpec spec{GrammarSpec::Kind::kGbnf, std::string(reinterpret_cast<const char*>(data), size),
                   {}};
  (void)CompileGrammar(spec, vocab, fuzz::FuzzLimits());
  return 0;
}
