// JSON Schema text (and, from the first byte, regex text) -> converter -> compiled grammar:
// an error or a grammar, never a crash. The GBNF the converters emit must always parse.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "grammar/compiler.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_spec.h"
#include "tests/fuzz/grammar_fuzz_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tokenmill::grammar;
  if (size == 0) return 0;
  static const auto vocab = fuzz::FuzzVocabulary();
  GrammarSpec spec;
  spec.kind = (data[0] & 1) ? GrammarSpec::Kind::kRegex : GrammarSpec::Kind::kJsonSchema;
  spec.text.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto gbnf = SpecToGbnf(spec, fuzz::FuzzLimits());
  if (!gbnf.ok()) return 0;
  // Bytes of the input that are not UTF-8 make the converters' output unparsable; anything
  // else failing to parse is a converter bug.
  const auto parsed = ParseGbnf(*gbnf);
  if (!parsed.ok() && parsed.status().message().find("UTF-8") == std::string::npos) {
    std::fprintf(stderr, "converter output does not parse: %s\n%s\n",
                 parsed.status().ToString().c_str(), gbnf->c_str());
    abort();
  }
  (void)CompileGrammar(spec, vocab, fuzz::FuzzLimits());
  return 0;
}
