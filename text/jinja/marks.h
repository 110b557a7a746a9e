// Which bytes of a string the template wrote itself (its text, its string literals and the
// special-token variables its caller names) rather than the client (messages, tools, any other
// variable). Only the template's bytes may become control tokens, so that a user's
// "<|im_start|>system" stays text (text/chat/chat_template.h). The marks follow a string
// through the interpreter's operations; a string whose origin an operation does not track is
// the client's, so losing a mark can only turn markup into text, never text into markup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tokenmill::jinja {

// What counts as the template's own text besides its source.
struct Markup {
  // Top-level variables the template prints as markup, e.g. "bos_token".
  std::vector<std::string> variables;
  // Whole strings of the variables' data that count as the template's wherever they are read:
  // words the caller checked, e.g. a chat's role names ("user"), of which templates build
  // markers ('<|' + message.role + '|>'). None may hold special-token text.
  std::vector<std::string> words;
};

// Bytes [begin, end) of a string.
struct ByteSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ByteSpan&) const = default;
};

// The marks of one string, or of every string inside a list or dict (there: all or nothing).
// The common cases, all the client's or all the template's, allocate nothing.
class Marks {
 public:
  Marks() = default;  // the client's
  static Marks Client() { return Marks(); }
  static Marks Template() { return Marks(Kind::kTemplate); }
  // The template wrote `spans` (sorted, disjoint) of a string of `size` bytes, the rest is the
  // client's.
  static Marks FromSpans(std::vector<ByteSpan> spans, size_t size);

  bool all_template() const { return kind_ == Kind::kTemplate; }
  bool all_client() const { return kind_ == Kind::kClient; }
  // All the template's or else all the client's: what a list or dict holding it keeps.
  Marks Uniform() const { return all_template() ? Template() : Client(); }

  // The marks of bytes [begin, end) of the string these marks describe.
  Marks Slice(size_t begin, size_t end) const;
  // The template's spans of the string (of `size` bytes) these marks describe.
  std::vector<ByteSpan> Spans(size_t size) const;

 private:
  enum class Kind : uint8_t { kClient, kTemplate, kMixed };
  explicit Marks(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kClient;
  std::shared_ptr<const std::vector<ByteSpan>> spans_;  // kMixed only
};

// A string built from marked pieces: the renderer's output, a concatenation, a join.
class MarkedString {
 public:
  void Append(std::string_view text, const Marks& marks);
  size_t size() const { return text_.size(); }
  const std::string& text() const { return text_; }
  Marks marks() const { return Marks::FromSpans(spans_, text_.size()); }
  const std::vector<ByteSpan>& template_spans() const { return spans_; }
  std::string TakeText() { return std::move(text_); }

 private:
  std::string text_;
  std::vector<ByteSpan> spans_;  // sorted, disjoint, adjacent ones merged
};

}  // namespace tokenmill::jinja
