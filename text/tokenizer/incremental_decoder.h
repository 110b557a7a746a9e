// Streams the text of generated tokens one token at a time, always as well-formed UTF-8: a
// character whose bytes are split across tokens (byte-fallback tokens, or byte-level BPE
// tokens that end inside a character) is held back until its last byte arrives.
#pragma once

#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace tokenmill {

class IncrementalDecoder {
 public:
  // `tokenizer` must outlive the decoder. The control tokens in `rendered_controls` come out
  // as their text even without options.render_special (a tool-call parser's markers).
  explicit IncrementalDecoder(const Tokenizer& tokenizer, DecodeOptions options = {},
                              std::vector<TokenId> rendered_controls = {})
      : tokenizer_(&tokenizer),
        options_(options),
        rendered_controls_(std::move(rendered_controls)) {}

  // Adds one token; returns the text that became complete (possibly empty). Bytes that can
  // never form a character come out as U+FFFD, so nothing is held back forever.
  std::string Add(TokenId id);

  // Ends the stream: what is still held back (an unfinished character) as U+FFFD.
  std::string Finish();

  // Bytes held back now (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::vector<TokenId> rendered_controls_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace tokenmill
