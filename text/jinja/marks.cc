#include "text/jinja/marks.h"

#include <algorithm>
#include <utility>

namespace tokenmill::jinja {

Marks Marks::FromSpans(std::vector<ByteSpan> spans, size_t size) {
  std::erase_if(spans, [](const ByteSpan& s) { return s.begin >= s.end; });
  if (spans.empty()) return Client();
  if (spans.size() == 1 && spans[0].begin == 0 && spans[0].end >= size) return Template();
  Marks marks(Kind::kMixed);
  marks.spans_ = std::make_shared<const std::vector<ByteSpan>>(std::move(spans));
  return marks;
}

Marks Marks::Slice(size_t begin, size_t end) const {
  if (kind_ != Kind::kMixed) return *this;
  std::vector<ByteSpan> out;
  // From the first span ending after `begin`: a character at a time stays logarithmic.
  auto span = std::upper_bound(spans_->begin(), spans_->end(), begin,
                               [](size_t at, const ByteSpan& s) { return at < s.end; });
  for (; span != spans_->end() && span->begin < end; ++span) {
    const size_t b = std::max(span->begin, begin);
    const size_t e = std::min(span->end, end);
    if (b < e) out.push_back({b - begin, e - begin});
  }
  return FromSpans(std::move(out), end - begin);
}

std::vector<ByteSpan> Marks::Spans(size_t size) const {
  switch (kind_) {
    case Kind::kClient:
      return {};
    case Kind::kTemplate:
      return size == 0 ? std::vector<ByteSpan>{} : std::vector<ByteSpan>{{0, size}};
    case Kind::kMixed:
      break;
  }
  return *spans_;
}

void MarkedString::Append(std::string_view text, const Marks& marks) {
  const size_t offset = text_.size();
  text_.append(text);
  if (marks.all_client() || text.empty()) return;
  for (const ByteSpan& span : marks.Spans(text.size())) {
    const ByteSpan shifted{offset + span.begin, offset + std::min(span.end, text.size())};
    if (!spans_.empty() && spans_.back().end == shifted.begin) {
      spans_.back().end = shifted.end;
    } else {
      spans_.push_back(shifted);
    }
  }
}

}  // namespace tokenmill::jinja
