// Draws complete outputs of a grammar spec, byte by byte, for tests that check them with
// independent validators (test_grammar_samples.py: jsonschema, Python's re):
//   grammar_sample_tool json_schema|regex|gbnf COUNT SEED < text
// prints one JSON string per line. The vocabulary is every single byte plus EOS; each step
// draws uniformly from the mask, except that with probability 1/3 it draws from the allowed
// closing bytes (quote, brackets, comma) or EOS, so outputs end. Walks that have not ended
// after 4096 bytes are dropped (counted on stderr).
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compiler.h"
#include "grammar/matcher.h"

int main(int argc, char** argv) {
  using namespace tokenmill::grammar;
  if (argc != 4) {
    std::cerr << "usage: grammar_sample_tool json_schema|regex|gbnf COUNT SEED < text\n";
    return 2;
  }
  const std::string kind = argv[1];
  GrammarSpec spec;
  spec.kind = kind == "json_schema" ? GrammarSpec::Kind::kJsonSchema
              : kind == "regex"     ? GrammarSpec::Kind::kRegex
                                    : GrammarSpec::Kind::kGbnf;
  spec.text.assign(std::istreambuf_iterator<char>(std::cin), {});
  Vocabulary bytes;
  for (int b = 0; b < 256; ++b) bytes.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.token_bytes.push_back("");
  const int32_t eos = 256;
  bytes.eos_tokens = {eos};
  const auto vocab = VocabularyIndex::Build(std::move(bytes));
  const auto compiled = CompileGrammar(spec, vocab, GrammarLimits());
  if (!compiled.ok()) {
    std::cerr << compiled.status().ToString() << "\n";
    return 1;
  }
  std::mt19937 rng(static_cast<uint32_t>(std::stoul(argv[3])));
  const int count = std::stoi(argv[2]);
  int dropped = 0;
  std::vector<uint32_t> mask(BitmaskWords(vocab->size()));
  for (int i = 0; i < count; ++i) {
    GrammarMatcher matcher(*compiled);
    std::string out;
    while (!matcher.IsTerminated() && out.size() < 4096) {
      matcher.FillNextTokenMask(mask);
      std::vector<int32_t> allowed, closing;
      for (int32_t t = 0; t <= eos; ++t) {
        if (!((mask[t / 32] >> (t % 32)) & 1)) continue;
        allowed.push_back(t);
        if (t == eos || t == '"' || t == '}' || t == ']' || t == ',') closing.push_back(t);
      }
      const bool close = !closing.empty() && std::uniform_int_distribution<int>(0, 2)(rng) == 0;
      const std::vector<int32_t>& from = close ? closing : allowed;
      const int32_t t = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
      if (!matcher.AcceptToken(t)) return 3;  // a token of the mask refused: a bug
      if (t != eos) out += static_cast<char>(t);
    }
    if (!matcher.IsTerminated()) {
      ++dropped;
      continue;
    }
    std::cout << nlohmann::json(out).dump() << "\n";
  }
  std::cerr << dropped << " of " << count << " walks did not end\n";
  return 0;
}
