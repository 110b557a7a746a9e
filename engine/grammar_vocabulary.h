// The model's vocabulary as the grammar engine sees it (grammar/vocabulary.h): each token's
// bytes from the tokenizer, with control tokens empty (a grammar never allows them) and the
// end-of-generation tokens as its EOS tokens. Built once per model.
#pragma once

#include "grammar/vocabulary.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

grammar::Vocabulary GrammarVocabulary(const Tokenizer& tokenizer);

}  // namespace tokenmill
