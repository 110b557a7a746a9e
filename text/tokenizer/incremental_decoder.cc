#include "text/tokenizer/incremental_decoder.h"

#include <algorithm>

#include "text/tokenizer/utf8.h"

namespace tokenmill {

using tokenizer::ClassifyUtf8;
using tokenizer::kReplacementCharacter;
using tokenizer::Utf8Sequence;

std::string IncrementalDecoder::Add(TokenId id) {
  const bool render = options_.render_special ||
                      std::find(rendered_controls_.begin(), rendered_controls_.end(), id) !=
                          rendered_controls_.end();
  std::string_view piece = tokenizer_->Piece(id, render);
  if (piece.empty()) return {};
  if (at_start_ && options_.strip_space_prefix && tokenizer_->PieceHasSpacePrefix(id)) {
    piece.remove_prefix(1);
  }
  at_start_ = false;
  pending_.append(piece);

  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const Utf8Sequence seq = ClassifyUtf8(pending_, pos);
    if (seq.kind == Utf8Sequence::Kind::kIncomplete) break;  // wait for the next token
    if (seq.kind == Utf8Sequence::Kind::kComplete) {
      out.append(pending_, pos, seq.length);
    } else {
      out.append(kReplacementCharacter);
    }
    pos += seq.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string IncrementalDecoder::Finish() {
  std::string out;
  for (size_t i = 0; i < pending_.size(); ++i) out.append(kReplacementCharacter);
  pending_.clear();
  return out;
}

}  // namespace tokenmill
