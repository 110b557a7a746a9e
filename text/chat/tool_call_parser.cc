#include "text/chat/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include <cctype>

#include "common/json_nesting.h"
#include "text/chat/call_scan.h"
#include "text/chat/harmony_parser.h"
#include "text/chat/marker_scan.h"
#include "text/chat/section_tool_calls.h"

namespace tokenmill {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

using call_scan::IsNameChar;
using call_scan::kFence;
using call_scan::kWhitespace;
using call_scan::Match;
using call_scan::ScanJsonFence;
using call_scan::SkipSpace;

// A cursor over the head of a call object: {"name": "<name>", "arguments": {
class HeadScanner {
 public:
  explicit HeadScanner(std::string_view text) : text_(text) {}

  Match Scan(std::string& name) {
    SkipSpace();
    if (Match m = Literal("{"); m != Match::kYes) return m;
    SkipSpace();
    if (Match m = Literal("\"name\""); m != Match::kYes) return m;
    SkipSpace();
    if (Match m = Literal(":"); m != Match::kYes) return m;
    SkipSpace();
    if (Match m = String(name); m != Match::kYes) return m;
    SkipSpace();
    if (Match m = Literal(","); m != Match::kYes) return m;
    SkipSpace();
    Match key = Literal("\"arguments\"");
    if (key == Match::kNo) key = Literal("\"parameters\"");
    if (key != Match::kYes) return key;
    SkipSpace();
    if (Match m = Literal(":"); m != Match::kYes) return m;
    SkipSpace();
    if (pos_ >= text_.size()) return Match::kNeedMore;
    return text_[pos_] == '{' ? Match::kYes : Match::kNo;
  }
  size_t pos() const { return pos_; }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && kWhitespace.find(text_[pos_]) != std::string_view::npos) ++pos_;
  }
  Match Literal(std::string_view literal) {
    const std::string_view rest = text_.substr(pos_);
    if (rest.starts_with(literal)) {
      pos_ += literal.size();
      return Match::kYes;
    }
    return literal.starts_with(rest) ? Match::kNeedMore : Match::kNo;
  }
  // A JSON string, decoded.
  Match String(std::string& out) {
    if (pos_ >= text_.size()) return Match::kNeedMore;
    if (text_[pos_] != '"') return Match::kNo;
    for (size_t i = pos_ + 1; i < text_.size(); ++i) {
      if (text_[i] == '\\') {
        ++i;
      } else if (text_[i] == '"') {
        const nlohmann::json parsed =
            nlohmann::json::parse(text_.substr(pos_, i + 1 - pos_), nullptr, false);
        if (!parsed.is_string() || parsed.get_ref<const std::string&>().empty()) {
          return Match::kNo;
        }
        out = parsed.get<std::string>();
        pos_ = i + 1;
        return Match::kYes;
      } else if (text_[i] == '\n') {
        return Match::kNo;
      }
    }
    return Match::kNeedMore;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// The head of a Mistral v11 call, after its [TOOL_CALLS]: name[ARGS] or
// name[CALL_ID]id[ARGS], then the arguments object's '{' (where `pos` ends).
Match ScanNamedHead(std::string_view text, std::string& name, std::string& id, size_t& pos) {
  pos = 0;
  while (pos < text.size() && IsNameChar(text[pos])) ++pos;
  if (pos == text.size()) return Match::kNeedMore;
  if (pos == 0) return Match::kNo;
  name = text.substr(0, pos);
  if (text.substr(pos).starts_with(kMistralCallId)) {
    pos += kMistralCallId.size();
    const size_t id_start = pos;
    while (pos < text.size() && std::isalnum(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos == text.size()) return Match::kNeedMore;
    id = text.substr(id_start, pos - id_start);
  }
  const std::string_view rest = text.substr(pos);
  if (!rest.starts_with(kMistralArgs)) {
    const bool may_be_marker =
        kMistralArgs.starts_with(rest) || (id.empty() && kMistralCallId.starts_with(rest));
    return may_be_marker ? Match::kNeedMore : Match::kNo;
  }
  pos += kMistralArgs.size();
  while (pos < text.size() && kWhitespace.find(text[pos]) != std::string_view::npos) ++pos;
  if (pos == text.size()) return Match::kNeedMore;
  return text[pos] == '{' ? Match::kYes : Match::kNo;
}

// Where the JSON object starting at text[0] == '{' ends (one past its '}'); npos if it has
// not ended yet.
size_t ObjectEnd(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kMistralV11: return "mistral_v11";
    case ToolCallFormat::kHarmony: return "harmony";
    case ToolCallFormat::kDeepSeekV3: return "deepseek_v3";
    case ToolCallFormat::kDeepSeekV31: return "deepseek_v31";
    case ToolCallFormat::kKimiK2: return "kimi_k2";
    case ToolCallFormat::kJson: break;
  }
  return "json";
}

std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                           ToolCallFormat::kMistral, ToolCallFormat::kMistralV11,
                           ToolCallFormat::kJson, ToolCallFormat::kHarmony,
                           ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31,
                           ToolCallFormat::kKimiK2}) {
    if (ToolCallFormatName(f) == name) return f;
  }
  return std::nullopt;
}

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (TemplateUsesHarmony(source)) return ToolCallFormat::kHarmony;
  // Kimi K2's first template shows no calls, only its tool_declare turn.
  if ((has(kKimiK2Markup.section_begin) && has(kKimiK2Markup.call_begin)) ||
      has("tool_declare<|im_middle|>")) {
    return ToolCallFormat::kKimiK2;
  }
  if (has(kDeepSeekMarkup.section_begin)) {
    return has("```json") ? ToolCallFormat::kDeepSeekV3 : ToolCallFormat::kDeepSeekV31;
  }
  if (has(kHermesOpen)) return ToolCallFormat::kHermes;
  if (has(kMistralMarker)) {
    return has(kMistralArgs) ? ToolCallFormat::kMistralV11 : ToolCallFormat::kMistral;
  }
  if (has(kPythonTag) || (has("<|start_header_id|>") && has("\"parameters\": "))) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kJson;
}

std::vector<std::string_view> ToolCallMarkers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return {kHermesOpen, kHermesClose};
    case ToolCallFormat::kLlama3Json: return {kPythonTag};
    case ToolCallFormat::kMistral: return {kMistralMarker};
    case ToolCallFormat::kMistralV11: return {kMistralMarker, kMistralCallId, kMistralArgs};
    case ToolCallFormat::kDeepSeekV3:
    case ToolCallFormat::kDeepSeekV31:
    case ToolCallFormat::kKimiK2: {
      const SectionMarkup& m = SectionMarkupOf(format);
      return {m.section_begin, m.section_end, m.call_begin, m.call_end, m.separator};
    }
    // Harmony's markers come out as text by the tokenizer's own rule (as llama.cpp's).
    case ToolCallFormat::kHarmony:
    case ToolCallFormat::kJson: break;
  }
  return {};
}

std::vector<std::string_view> ToolCallOpeners(ToolCallFormat format) {
  if (format == ToolCallFormat::kKimiK2) {
    return {kKimiK2Markup.section_begin, kKimiK2Markup.call_begin};
  }
  if (IsSectionFormat(format)) return {kDeepSeekMarkup.section_begin};
  return {};
}

void ParsedOutput::Append(ParsedOutput&& more) {
  content += more.content;
  reasoning += more.reasoning;
  for (ToolCallDelta& delta : more.tool_calls) {
    // Fragments join the call's previous fragment; its first delta (id, name) stays apart.
    if (!tool_calls.empty() && tool_calls.back().index == delta.index && delta.id.empty() &&
        tool_calls.back().id.empty()) {
      tool_calls.back().arguments += delta.arguments;
    } else {
      tool_calls.push_back(std::move(delta));
    }
  }
}

std::string NewToolCallId(ToolCallFormat format, std::mt19937_64& random) {
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  const bool mistral =
      format == ToolCallFormat::kMistral || format == ToolCallFormat::kMistralV11;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[pick(random)];
  return id;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, uint64_t seed)
    : format_(format), random_(seed) {}

void ToolCallParser::Feed(std::string_view text, ParsedOutput& out) {
  pending_ += text;
  Step(out, /*final=*/false);
}

void ToolCallParser::Finish(ParsedOutput& out) {
  Step(out, /*final=*/true);
  // Whitespace held back: content of an answer, nothing around calls.
  if (num_calls_ == 0) out.content += held_space_ + pending_;
  held_space_.clear();
  pending_.clear();
}

void ToolCallParser::Step(ParsedOutput& out, bool final) {
  for (;;) {
    bool progressed = false;
    switch (state_) {
      case State::kStart: progressed = StepStart(final); break;
      case State::kText: progressed = StepText(out, final); break;
      case State::kCallList: progressed = StepCallList(out, final); break;
      case State::kHead: progressed = StepHead(out, final); break;
      case State::kArguments: progressed = StepArguments(out); break;
      case State::kCallTail: progressed = StepCallTail(final); break;
      case State::kBuffered: progressed = StepBuffered(out, final); break;
      case State::kDone:
        EmitContent(pending_, out);
        pending_.clear();
        break;
      case State::kSection: progressed = StepSection(out, final); break;
      case State::kSectionHead: progressed = StepSectionHead(out, final); break;
      case State::kSectionTail: progressed = StepSectionTail(final); break;
    }
    if (!progressed) return;
  }
}

bool ToolCallParser::StepStart(bool final) {
  if (format_ == ToolCallFormat::kHermes) return StepHermesStart(final);
  if (format_ == ToolCallFormat::kMistral || format_ == ToolCallFormat::kMistralV11 ||
      IsSectionFormat(format_)) {
    state_ = State::kText;  // their marker may come anywhere
    return true;
  }
  // Llama 3.x and plain JSON: a call is the whole output, from its first character.
  const size_t start = SkipSpace(pending_);
  if (start == pending_.size()) return false;
  const std::string_view rest = std::string_view(pending_).substr(start);
  if (format_ == ToolCallFormat::kLlama3Json && rest.size() < kPythonTag.size() &&
      kPythonTag.starts_with(rest) && !final) {
    return false;
  }
  const bool python_tag = format_ == ToolCallFormat::kLlama3Json && rest.starts_with(kPythonTag);
  raw_markup_.assign(pending_, 0, start);
  pending_.erase(0, start);
  if (python_tag) {
    raw_markup_ += kPythonTag;
    pending_.erase(0, kPythonTag.size());
    state_ = State::kHead;
  } else if (pending_[0] == '{') {
    state_ = State::kHead;
  } else if (pending_[0] == '[' && format_ == ToolCallFormat::kJson) {
    raw_markup_ += '[';
    pending_.erase(0, 1);
    in_list_ = true;
    state_ = State::kHead;
  } else {
    held_space_ = std::move(raw_markup_);
    raw_markup_.clear();
    state_ = State::kDone;
  }
  return true;
}

// Hermes's <tool_call> may come anywhere (StepText). Qwen2.5-Coder, shown that markup by its
// template, leaves the tags out: its output is the call object alone, in a ```json fence, or
// with the doubled braces of the template's example ({{"name": <function-name>, ...}}, a Python
// format string's escape left in Qwen2.5's templates). llama.cpp's Hermes parser takes the
// first two too. Only where the output opens with it: an object later in an answer is text.
bool ToolCallParser::StepHermesStart(bool final) {
  size_t start = SkipSpace(pending_);
  bool fenced = false;
  if (start < pending_.size() && pending_[start] == '`') {
    size_t size = 0;
    const Match fence = ScanJsonFence(std::string_view(pending_).substr(start), size);
    if (fence == Match::kNeedMore && !final) return false;
    fenced = fence == Match::kYes;
    if (fenced) start += size + SkipSpace(std::string_view(pending_).substr(start + size));
  }
  const std::string_view rest = std::string_view(pending_).substr(start);
  const bool may_be_call = start < pending_.size() ? pending_[start] == '{' : !final;
  if (!may_be_call) {
    state_ = State::kText;  // content; a tagged call may still come
    return true;
  }
  if (rest.size() < 2 && !final) return false;  // "{" alone: the call's or a doubled one
  const bool doubled = rest.starts_with("{{");
  const size_t markup = start + (doubled ? 1 : 0);
  raw_markup_.assign(pending_, 0, markup);
  pending_.erase(0, markup);
  untagged_doubled_ = doubled;
  untagged_fenced_ = fenced;
  state_ = State::kHead;
  return true;
}

bool ToolCallParser::StepText(ParsedOutput& out, bool final) {
  if (IsSectionFormat(format_)) return StepSectionText(out, final);
  const std::string_view marker =
      format_ == ToolCallFormat::kHermes ? kHermesOpen : kMistralMarker;
  const MarkerScan scan = ScanForMarker(pending_, marker);
  const size_t emit = scan.found || !final ? scan.safe_end : pending_.size();
  EmitContent(std::string_view(pending_).substr(0, emit), out);
  pending_.erase(0, emit);
  if (!scan.found) return false;
  held_space_.clear();  // the whitespace before a call belongs to neither
  raw_markup_ = marker;
  pending_.erase(0, marker.size());
  if (format_ == ToolCallFormat::kMistral) {
    // [TOOL_CALLS] then a list of calls (or a single one).
    const size_t start = SkipSpace(pending_);
    if (start == pending_.size()) {
      state_ = State::kCallList;  // waits for '[' / '{' in StepCallList
      in_list_ = false;
      return final ? (GiveUp(out), true) : false;
    }
    if (pending_[start] == '[') {
      raw_markup_ += pending_.substr(0, start + 1);
      pending_.erase(0, start + 1);
      in_list_ = true;
    }
  }
  state_ = State::kHead;
  return true;
}

bool ToolCallParser::StepCallList(ParsedOutput& out, bool final) {
  const size_t start = SkipSpace(pending_);
  const std::string_view rest = std::string_view(pending_).substr(start);
  if (rest.empty() && !final) return false;
  // Mistral: [TOOL_CALLS] seen, its list (or object) not yet.
  if (num_calls_ == 0 && format_ == ToolCallFormat::kMistral && raw_markup_ == kMistralMarker) {
    if (rest.empty()) return GiveUp(out), true;
    if (rest[0] == '[') {
      raw_markup_ += pending_.substr(0, start + 1);
      pending_.erase(0, start + 1);
      in_list_ = true;
    }
    state_ = State::kHead;
    return true;
  }
  if (format_ == ToolCallFormat::kHermes) {
    if (untagged_doubled_ || untagged_fenced_) {  // what closes an untagged call, when it comes
      const std::string_view close = untagged_doubled_ ? "}" : kFence;
      if (rest.size() < close.size() && close.starts_with(rest) && !final) return false;
      if (rest.starts_with(close)) pending_.erase(0, start + close.size());
      (untagged_doubled_ ? untagged_doubled_ : untagged_fenced_) = false;
      return true;
    }
    if (rest.size() < kHermesClose.size() && kHermesClose.starts_with(rest) && !final) {
      return false;
    }
    if (rest.starts_with(kHermesClose)) pending_.erase(0, start + kHermesClose.size());
    state_ = State::kText;
    return true;
  }
  const char separator = in_list_ ? ',' : ';';
  if (!rest.empty() && rest[0] == separator &&
      (in_list_ || format_ == ToolCallFormat::kLlama3Json)) {
    raw_markup_ = pending_.substr(0, start + 1);
    pending_.erase(0, start + 1);
    state_ = State::kHead;
    return true;
  }
  if (in_list_ && !rest.empty() && rest[0] == ']') pending_.erase(0, start + 1);
  in_list_ = false;
  state_ = State::kDone;
  return true;
}

bool ToolCallParser::StepHead(ParsedOutput& out, bool final) {
  if (format_ == ToolCallFormat::kMistralV11) return StepNamedHead(out, final);
  std::string name;
  HeadScanner head(pending_);
  switch (head.Scan(name)) {
    case Match::kNeedMore:
      if (final) GiveUp(out);
      return final;
    case Match::kNo: {
      const size_t start = SkipSpace(pending_);
      if (start < pending_.size() && pending_[start] == '{') {
        raw_markup_ += pending_.substr(0, start);
        pending_.erase(0, start);
        state_ = State::kBuffered;
      } else {
        GiveUp(out);
      }
      return true;
    }
    case Match::kYes: break;
  }
  pending_.erase(0, head.pos());
  BeginCall(std::move(name), "", out);
  depth_ = 0;
  in_string_ = escaped_ = false;
  state_ = State::kArguments;
  return true;
}

bool ToolCallParser::StepNamedHead(ParsedOutput& out, bool final) {
  std::string name;
  std::string id;
  size_t pos = 0;
  const Match match = ScanNamedHead(pending_, name, id, pos);
  if (match == Match::kNeedMore && !final) return false;
  if (match != Match::kYes) {
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

bool ToolCallParser::StepArguments(ParsedOutput& out) {
  size_t i = 0;
  bool done = false;
  for (; i < pending_.size() && !done; ++i) {
    const char c = pending_[i];
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      done = true;
    }
  }
  if (i > 0) {
    AddArguments(pending_.substr(0, i), out);
    pending_.erase(0, i);
  }
  if (!done) return false;
  ++num_complete_calls_;
  // v11 calls have no object around their arguments: the next one has its own marker.
  state_ = format_ == ToolCallFormat::kMistralV11 ? State::kText
           : IsSectionFormat(format_)             ? State::kSectionTail
                                                  : State::kCallTail;
  raw_markup_.clear();
  return true;
}

bool ToolCallParser::StepCallTail(bool final) {
  const size_t start = SkipSpace(pending_);
  if (start == pending_.size()) {
    if (final) state_ = State::kDone;
    return final;
  }
  if (pending_[start] == '}') {
    pending_.erase(0, start + 1);
    raw_markup_.clear();
    state_ = State::kCallList;
  } else {
    state_ = State::kDone;  // the call is out; what follows its arguments is text
  }
  return true;
}

bool ToolCallParser::StepBuffered(ParsedOutput& out, bool final) {
  const size_t end = ObjectEnd(pending_);
  if (end == std::string::npos) {
    if (final) GiveUp(out);
    return final;
  }
  // A model's call nested deeper than client JSON may be is not parsed: printing its
  // arguments would recurse once per level. It stays text.
  const std::string_view text = std::string_view(pending_).substr(0, end);
  const nlohmann::json call = JsonTextNestsDeeperThan(text)
                                  ? nlohmann::json()
                                  : nlohmann::json::parse(text, nullptr, false);
  const auto name = call.is_object() ? call.find("name") : call.end();
  auto arguments = call.is_object() ? call.find("arguments") : call.end();
  if (call.is_object() && arguments == call.end()) arguments = call.find("parameters");
  std::string arguments_text;
  if (arguments != call.end() && arguments->is_object()) {
    arguments_text = arguments->dump();
  } else if (arguments != call.end() && arguments->is_string() &&
             nlohmann::json::parse(arguments->get<std::string>(), nullptr, false).is_object()) {
    arguments_text = arguments->get<std::string>();  // some models send the JSON as a string
  }
  if (name == call.end() || !name->is_string() || name->get<std::string>().empty() ||
      arguments_text.empty()) {
    GiveUp(out);
    return true;
  }
  pending_.erase(0, end);
  BeginCall(name->get<std::string>(), "", out);
  AddArguments(arguments_text, out);
  ++num_complete_calls_;
  raw_markup_.clear();
  state_ = State::kCallList;
  return true;
}

void ToolCallParser::GiveUp(ParsedOutput& out) {
  EmitContent(raw_markup_ + pending_, out);
  raw_markup_.clear();
  pending_.clear();
  state_ = State::kDone;
}

void ToolCallParser::EmitContent(std::string_view text, ParsedOutput& out) {
  const size_t last = text.find_last_not_of(kWhitespace);
  if (last == std::string_view::npos) {
    held_space_ += text;
    return;
  }
  out.content += held_space_;
  out.content += text.substr(0, last + 1);
  held_space_.assign(text.substr(last + 1));
}

void ToolCallParser::AddArguments(std::string_view fragment, ParsedOutput& out) {
  out.Append({.content = "", .reasoning = "",
              .tool_calls = {{num_calls_ - 1, "", "", std::string(fragment)}}});
}

void ToolCallParser::BeginCall(std::string name, std::string id, ParsedOutput& out) {
  if (id.empty()) id = NewToolCallId(format_, random_);
  out.tool_calls.push_back({num_calls_, std::move(id), std::move(name), ""});
  ++num_calls_;
}

}  // namespace tokenmill
