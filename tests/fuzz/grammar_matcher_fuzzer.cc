// A fixed set of grammars, driven by the input: each byte picks a token to accept (from the
// mask or not), a rollback, or a mask. Checks the matcher's invariants: a token of the mask is
// accepted, one outside it refused with the state unchanged, and a rollback restores the mask.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "tests/fuzz/grammar_fuzz_vocab.h"

namespace {

using namespace tokenmill::grammar;

std::vector<std::shared_ptr<const CompiledGrammar>> Grammars() {
  const auto vocab = fuzz::FuzzVocabulary();
  std::vector<std::shared_ptr<const CompiledGrammar>> out;
  const GrammarSpec specs[] = {
      {GrammarSpec::Kind::kJsonObject, "", {}},
      {GrammarSpec::Kind::kJsonSchema,
       R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
           "b": {"type": "array", "items": {"type": "integer", "minimum": -3}}}})", {}},
      {GrammarSpec::Kind::kRegex, R"((ab|a\d{1,3})+[^x]?)", {}},
      {GrammarSpec::Kind::kGbnf, "root ::= (\"{\" root \"}\")* | [é€a-c]{2}\n", {}},
  };
  for (const GrammarSpec& spec : specs) {
    auto compiled = CompileGrammar(spec, vocab, fuzz::FuzzLimits());
    if (!compiled.ok()) abort();
    out.push_back(*compiled);
  }
  return out;
}

bool Allowed(const std::vector<uint32_t>& mask, int32_t t) { return (mask[t / 32] >> (t % 32)) & 1; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto grammars = Grammars();
  if (size == 0) return 0;
  GrammarMatcher matcher(grammars[data[0] % grammars.size()]);
  const size_t n = matcher.vocab_size();
  std::vector<uint32_t> mask(BitmaskWords(n)), again(mask.size());
  std::vector<std::vector<uint32_t>> masks;  // before each accepted token
  for (size_t i = 1; i < size; ++i) {
    matcher.FillNextTokenMask(mask);
    const uint8_t op = data[i];
    if (op >= 0xF0 && matcher.num_accepted_tokens() > 0) {
      const int back = 1 + (op & 0x0F) % matcher.num_accepted_tokens();
      matcher.Rollback(back);
      matcher.FillNextTokenMask(again);
      if (again != masks[masks.size() - back]) abort();
      masks.resize(masks.size() - back);
      continue;
    }
    const int32_t token = static_cast<int32_t>(op % n);
    const bool accepted = matcher.AcceptToken(token);
    if (accepted != Allowed(mask, token)) abort();
    if (accepted) {
      masks.push_back(mask);
    } else {
      matcher.FillNextTokenMask(again);
      if (again != mask) abort();
    }
  }
  return 0;
}
