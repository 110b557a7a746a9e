#include "text/jinja/marked_ops.h"

#include <numeric>

#include "text/jinja/python_ops.h"
#include "text/jinja/string_ops.h"

namespace tokenmill::jinja {
namespace {

bool Uniform(const Marks& marks) { return marks.all_client() || marks.all_template(); }

}  // namespace

Marks StrMarks(const Value& value) {
  if (value.is_string()) return value.marks();
  if (value.is_data() && value.data().is_structured()) return value.marks().Uniform();
  return Marks::Client();
}

void AppendStr(MarkedString& out, const Value& value) {
  if (value.is_string()) {  // no copy: the common case, printing a variable
    CheckStringSize(out.size() + value.str().size());
    out.Append(value.str(), value.marks());
    return;
  }
  const std::string text = PyStr(value);
  CheckStringSize(out.size() + text.size());
  out.Append(text, StrMarks(value));
}

Value ValueOf(MarkedString built) {
  const Marks marks = built.marks();
  return Value::Of(built.TakeText(), marks);
}

Marks ContainerMarks(std::span<const Value> items) {
  for (const Value& item : items) {
    const bool writes_text = item.is_string() || (item.is_data() && item.data().is_structured());
    if (writes_text && !item.marks().all_template()) return Marks::Client();
  }
  return Marks::Template();
}

Value CharsOf(const Value& s, const std::vector<size_t>& indices) {
  const std::u32string chars = DecodeUtf8(s.str());
  if (Uniform(s.marks())) {
    std::u32string out;
    out.reserve(indices.size());
    for (const size_t i : indices) out.push_back(chars[i]);
    return Value::Of(EncodeUtf8(out), s.marks());
  }
  const std::vector<ByteSpan> spans = CodepointSpans(s.str());
  MarkedString out;
  for (const size_t i : indices) {
    const std::string c = EncodeUtf8(std::u32string_view(&chars[i], 1));
    const Marks marks = s.marks().Slice(spans[i].begin, spans[i].end);
    // A byte that was not UTF-8 is re-encoded longer: it keeps only a uniform mark.
    out.Append(c, c.size() == spans[i].end - spans[i].begin ? marks : marks.Uniform());
  }
  return ValueOf(std::move(out));
}

std::vector<Value> CharValues(const Value& s) {
  const std::u32string chars = DecodeUtf8(s.str());
  const std::vector<ByteSpan> spans =
      Uniform(s.marks()) ? std::vector<ByteSpan>() : CodepointSpans(s.str());
  std::vector<Value> out;
  out.reserve(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    std::string c = EncodeUtf8(std::u32string_view(&chars[i], 1));
    const Marks marks =
        spans.empty() ? s.marks() : s.marks().Slice(spans[i].begin, spans[i].end).Uniform();
    out.push_back(Value::Of(std::move(c), marks));
  }
  return out;
}

Value Transformed(const Value& s, const std::string& result) {
  const Marks marks = StrMarks(s);
  if (Uniform(marks) || PyStr(s).size() == result.size()) return Value::Of(result, marks);
  return Value::Of(result, marks.Uniform());
}

Value ReplaceMarked(const Value& s, const std::string& old, const Value& with, int64_t count) {
  const std::string text = PyStr(s);
  const Marks marks = StrMarks(s);
  const std::string replacement = PyStr(with);
  const Marks with_marks = StrMarks(with);
  const bool same_uniform = (marks.all_client() && with_marks.all_client()) ||
                            (marks.all_template() && with_marks.all_template());
  if (same_uniform || old.empty()) {  // Python inserts `with` around every character: rare
    const Marks uniform =
        marks.all_template() && with_marks.all_template() ? Marks::Template() : Marks::Client();
    return Value::Of(Replace(text, old, replacement, count), uniform);
  }
  MarkedString out;
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t found = text.find(old, start);
    if (found == std::string::npos) break;
    out.Append(std::string_view(text).substr(start, found - start), marks.Slice(start, found));
    out.Append(replacement, with_marks);
    CheckStringSize(out.size());
    start = found + old.size();
  }
  out.Append(std::string_view(text).substr(start), marks.Slice(start, text.size()));
  return ValueOf(std::move(out));
}

Value StripMarked(const Value& s, const std::optional<std::string>& chars, bool left, bool right) {
  if (!s.is_string() || Uniform(s.marks())) {
    return Value::Of(Strip(PyStr(s), chars, left, right), StrMarks(s));
  }
  const auto [begin, end] = StripRange(DecodeUtf8(s.str()), chars, left, right);
  std::vector<size_t> kept(end - begin);
  std::iota(kept.begin(), kept.end(), begin);
  return CharsOf(s, kept);
}

}  // namespace tokenmill::jinja
