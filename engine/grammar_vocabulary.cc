#include "engine/grammar_vocabulary.h"

#include <string>

namespace tokenmill {

grammar::Vocabulary GrammarVocabulary(const Tokenizer& tokenizer) {
  grammar::Vocabulary vocab;
  vocab.token_bytes.reserve(static_cast<size_t>(tokenizer.vocab_size()));
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    // The bytes a continuation decodes to (no SentencePiece space stripping: output never
    // starts a text), empty for control tokens.
    vocab.token_bytes.emplace_back(tokenizer.Piece(id));
  }
  // An end-of-generation token ends the output wherever the grammar lets it end, and is never
  // text inside it (the scheduler would stop there), even where its type is not control.
  for (const TokenId id : tokenizer.end_of_generation_ids()) {
    if (id < 0 || id >= tokenizer.vocab_size()) continue;
    vocab.token_bytes[static_cast<size_t>(id)].clear();
    vocab.eos_tokens.push_back(id);
  }
  return vocab;
}

}  // namespace tokenmill
