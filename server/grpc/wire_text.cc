#include "server/grpc/wire_text.h"

#include "text/tokenizer/utf8.h"

namespace tokenmill::server {

std::string WireText(const Tokenizer& tokenizer, std::span<const TokenId> ids,
                     bool render_special) {
  return tokenizer::SanitizeUtf8(
      tokenizer.Decode(ids, DecodeOptions{.render_special = render_special}));
}

}  // namespace tokenmill::server
