// Token ids as the wire's text: what Detokenize answers, and each logprob's token text in a
// Generate response (so the two agree for the same ids).
#pragma once

#include <span>
#include <string>

#include "text/tokenizer/tokenizer.h"

namespace tokenmill::server {

// The ids decoded (control tokens rendered as their text with `render_special`) and made
// valid UTF-8, as protobuf strings must be: a cut-off character becomes U+FFFD.
std::string WireText(const Tokenizer& tokenizer, std::span<const TokenId> ids,
                     bool render_special);

}  // namespace tokenmill::server
