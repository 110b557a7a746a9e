// ToolCallParser's steps for DeepSeek's and Kimi K2's sections of marked calls
// (section_tool_calls.h); the arguments stream through the shared StepArguments.
#include "text/chat/section_tool_calls.h"

#include <array>

#include "text/chat/call_scan.h"
#include "text/chat/marker_scan.h"

namespace tokenmill {
namespace {

using call_scan::IsNameChar;
using call_scan::kFence;
using call_scan::Match;
using call_scan::ScanJsonFence;
using call_scan::SkipSpace;

// A head longer than this (names are at most 64 characters to OpenAI) is no call: it stays
// text instead of being held back.
constexpr size_t kMaxHeadBytes = 512;
constexpr std::string_view kDeepSeekCallType = "function";  // V3's form: the call's type
constexpr std::string_view kKimiIdPrefix = "functions.";

// Whether `text` may begin with `literal` once more of it arrives.
bool MayStartWith(std::string_view text, std::string_view literal) {
  return text.size() < literal.size() && literal.starts_with(text);
}

// The characters before `separator` in `text`: a name's (or a Kimi id's, with ':'), up to the
// separator or a beginning of it at the end.
Match ScanUpTo(std::string_view text, std::string_view separator, bool id, size_t& end) {
  end = 0;
  while (end < text.size() && (IsNameChar(text[end]) || (id && text[end] == ':'))) ++end;
  const std::string_view rest = text.substr(end);
  if (rest.starts_with(separator)) return end > 0 ? Match::kYes : Match::kNo;
  return rest.empty() || MayStartWith(rest, separator) ? Match::kNeedMore : Match::kNo;
}

// After <｜tool▁sep｜>: V3.1's arguments object, or V3's NAME\n```json\n then the object.
// `pos` ends at the object's '{'.
Match ScanDeepSeekAfterSeparator(std::string_view text, std::string_view head_type,
                                 std::string& name, bool& fenced, size_t& pos) {
  pos = SkipSpace(text);
  if (pos == text.size()) return Match::kNeedMore;
  if (text[pos] == '{') {  // V3.1: the head was the name
    name = head_type;
    fenced = false;
    return Match::kYes;
  }
  if (head_type != kDeepSeekCallType) return Match::kNo;
  size_t end = pos;
  while (end < text.size() && IsNameChar(text[end])) ++end;
  if (end == text.size()) return Match::kNeedMore;
  if (end == pos) return Match::kNo;
  name = text.substr(pos, end - pos);
  pos = end;
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\r')) ++pos;
  if (pos == text.size()) return Match::kNeedMore;
  if (text[pos] != '\n') return Match::kNo;
  size_t fence = 0;
  const Match opened = ScanJsonFence(text.substr(pos + 1), fence);
  if (opened != Match::kYes) return opened;
  pos += 1 + fence;
  pos += SkipSpace(text.substr(pos));
  if (pos == text.size()) return Match::kNeedMore;
  if (text[pos] != '{') return Match::kNo;
  fenced = true;
  return Match::kYes;
}

// Kimi's call id functions.NAME:IDX as the function's name: NAME (an id without the prefix or
// the index gives what it has). Empty where nothing is left or a ':' stays.
std::string_view KimiCallName(std::string_view id) {
  if (id.starts_with(kKimiIdPrefix)) id.remove_prefix(kKimiIdPrefix.size());
  const size_t colon = id.rfind(':');
  if (colon != std::string_view::npos &&
      id.find_first_not_of("0123456789", colon + 1) == std::string_view::npos) {
    id = id.substr(0, colon);
  }
  return id.find(':') == std::string_view::npos ? id : std::string_view();
}

}  // namespace

// Content until the section's marker (Kimi: or a call's own, its section marker left out).
bool ToolCallParser::StepSectionText(ParsedOutput& out, bool final) {
  if (after_section_) {  // the whitespace after a section belongs to neither
    pending_.erase(0, SkipSpace(pending_));
    if (pending_.empty()) return false;
    after_section_ = false;
  }
  const SectionMarkup& m = SectionMarkupOf(format_);
  const std::array<std::string_view, 2> openers = {m.section_begin, m.call_begin};
  const size_t count = format_ == ToolCallFormat::kKimiK2 ? 2 : 1;
  size_t which = 0;
  const MarkerScan scan =
      ScanForMarkers(pending_, std::span(openers.data(), count), which);
  const size_t emit = scan.found || !final ? scan.safe_end : pending_.size();
  EmitContent(std::string_view(pending_).substr(0, emit), out);
  pending_.erase(0, emit);
  if (!scan.found) return false;
  held_space_.clear();  // the whitespace before a call belongs to neither
  raw_markup_ = openers[which];
  pending_.erase(0, openers[which].size());
  state_ = which == 0 ? State::kSection : State::kSectionHead;
  return true;
}

// Between calls: the next call's marker, the section's end, or (DeepSeek) a call without its
// marker. Anything else ends the calls: it is content.
bool ToolCallParser::StepSection(ParsedOutput& out, bool final) {
  const SectionMarkup& m = SectionMarkupOf(format_);
  const size_t start = SkipSpace(pending_);
  const std::string_view rest = std::string_view(pending_).substr(start);
  if (!final && (rest.empty() || MayStartWith(rest, m.call_begin) ||
                 MayStartWith(rest, m.section_end))) {
    return false;
  }
  if (rest.starts_with(m.call_begin)) {
    raw_markup_.append(pending_, 0, start + m.call_begin.size());
    pending_.erase(0, start + m.call_begin.size());
    state_ = State::kSectionHead;
  } else if (rest.starts_with(m.section_end) && raw_markup_.empty()) {
    pending_.erase(0, start + m.section_end.size());
    state_ = State::kText;  // more content (or another section) may follow
    after_section_ = true;
  } else if (format_ != ToolCallFormat::kKimiK2 && !rest.empty()) {
    raw_markup_.append(pending_, 0, start);
    pending_.erase(0, start);
    state_ = State::kSectionHead;
  } else {
    GiveUp(out);  // what followed the calls (or the markup of a section without any) is text
  }
  return true;
}

// The head up to the arguments' '{': DeepSeek's name (V3's type, name and fence), Kimi's id.
// A head that does not parse stays text, its markup included.
bool ToolCallParser::StepSectionHead(ParsedOutput& out, bool final) {
  const SectionMarkup& m = SectionMarkupOf(format_);
  const bool kimi = format_ == ToolCallFormat::kKimiK2;
  const std::string_view text = pending_;
  size_t head_end = 0;
  Match match = ScanUpTo(text, m.separator, /*id=*/kimi, head_end);
  std::string name;
  std::string id;
  size_t pos = 0;
  if (match == Match::kYes) {
    const std::string_view head = text.substr(0, head_end);
    const std::string_view after = text.substr(head_end + m.separator.size());
    if (kimi) {
      id = head;
      name = KimiCallName(head);
      pos = SkipSpace(after);
      match = name.empty() ? Match::kNo
              : pos == after.size() ? Match::kNeedMore
              : after[pos] == '{'   ? Match::kYes
                                    : Match::kNo;
    } else {
      match = ScanDeepSeekAfterSeparator(after, head, name, section_fenced_, pos);
    }
    pos += head_end + m.separator.size();
  }
  // The same verdict however the head arrives: too long is no call, whole or streamed.
  if (match == Match::kYes && pos > kMaxHeadBytes) match = Match::kNo;
  if (match == Match::kNeedMore && (final || pending_.size() > kMaxHeadBytes)) match = Match::kNo;
  if (match == Match::kNeedMore) return false;
  if (match == Match::kNo) {
    GiveUp(out);
    return true;
  }
  pending_.erase(0, pos);
  BeginCall(std::move(name), std::move(id), out);
  depth_ = 0;
  in_string_ = escaped_ = false;
  state_ = State::kArguments;
  return true;
}

// After the arguments: V3's closing fence, then the call's end marker (Kimi's may be left
// out). What else follows is left to StepSection.
bool ToolCallParser::StepSectionTail(bool final) {
  const SectionMarkup& m = SectionMarkupOf(format_);
  const size_t start = SkipSpace(pending_);
  const std::string_view rest = std::string_view(pending_).substr(start);
  const std::string_view close = section_fenced_ ? kFence : m.call_end;
  if (!final && (rest.empty() || MayStartWith(rest, close))) return false;
  if (rest.starts_with(close)) pending_.erase(0, start + close.size());
  if (section_fenced_) {
    section_fenced_ = false;  // then the end marker
    return true;
  }
  state_ = State::kSection;
  return true;
}

}  // namespace tokenmill
