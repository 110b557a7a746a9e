#include "text/chat/harmony_parser.h"

#include <algorithm>
#include <array>
#include <optional>

#include "text/chat/marker_scan.h"

namespace tokenmill {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kFunctionsPrefix = "functions.";
// Where a body ends: the markers that close it, and those that open the next header (kept).
constexpr std::array<std::string_view, 3> kBodyEnds = {"<|end|>", "<|call|>", "<|return|>"};
constexpr std::array<std::string_view, 2> kNextHeader = {kStart, kChannel};
// A header is a few words; longer text without <|message|> is not one.
constexpr size_t kMaxHeader = 256;

struct Header {
  std::string_view channel;
  std::string_view recipient;  // empty: none
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n'; }

// The word at the start of `text` (up to a space or a marker).
std::string_view Word(std::string_view text) {
  size_t end = 0;
  while (end < text.size() && !IsSpace(text[end]) && text[end] != '<') ++end;
  return text.substr(0, end);
}

std::optional<Header> ParseHeader(std::string_view header) {
  if (header.starts_with(kStart)) header.remove_prefix(kStart.size());
  const size_t channel_at = header.find(kChannel);
  if (channel_at == std::string_view::npos) return std::nullopt;
  Header out;
  out.channel = Word(header.substr(channel_at + kChannel.size()));
  if (out.channel != "analysis" && out.channel != "commentary" && out.channel != "final") {
    return std::nullopt;
  }
  // The role may be "assistant" only; a recipient may stand before or after the channel.
  std::string_view role = header.substr(0, channel_at);
  if (const size_t to = header.find("to="); to != std::string_view::npos) {
    out.recipient = Word(header.substr(to + 3));
    if (out.recipient.empty()) return std::nullopt;
    if (to < channel_at) role = header.substr(0, to);
  }
  while (!role.empty() && IsSpace(role.back())) role.remove_suffix(1);
  if (!role.empty() && role != "assistant") return std::nullopt;
  // What may follow: the recipient, a content type (json, code), <|constrain|>TYPE.
  std::string_view rest = header.substr(channel_at + kChannel.size() + out.channel.size());
  while (!rest.empty()) {
    if (IsSpace(rest.front())) {
      rest.remove_prefix(1);
    } else if (rest.starts_with(kConstrain)) {
      rest.remove_prefix(kConstrain.size());
    } else if (const std::string_view word = Word(rest); !word.empty()) {
      rest.remove_prefix(word.size());
    } else {
      return std::nullopt;  // a marker other than <|constrain|>
    }
  }
  return out;
}

// Whether `text` could still grow into a header: it starts like one, or like a marker.
bool MayBeHeader(std::string_view text) {
  for (std::string_view opening : {kStart, kChannel, std::string_view("assistant")}) {
    const size_t n = std::min(text.size(), opening.size());
    if (text.substr(0, n) == opening.substr(0, n)) return true;
  }
  return false;
}

// The earliest of `markers` in `text`, or where a suffix that may begin one starts.
struct EarliestMarker {
  size_t at = std::string_view::npos;  // npos: none found
  std::string_view marker;
  size_t safe_end = 0;
};

template <size_t N>
EarliestMarker FindEarliest(std::string_view text,
                            const std::array<std::string_view, N>& markers,
                            EarliestMarker best) {
  for (std::string_view marker : markers) {
    const MarkerScan scan = ScanForMarker(text, marker);
    if (scan.found && (best.at == std::string_view::npos || scan.safe_end < best.at)) {
      best.at = scan.safe_end;
      best.marker = marker;
    }
    best.safe_end = std::min(best.safe_end, scan.safe_end);
  }
  return best;
}

}  // namespace

bool TemplateUsesHarmony(std::string_view source) {
  return source.find(kChannel) != std::string_view::npos &&
         source.find(kMessage) != std::string_view::npos;
}

HarmonyParser::HarmonyParser(bool tools, uint64_t seed) : tools_(tools), random_(seed) {}

void HarmonyParser::Feed(std::string_view text, ParsedOutput& out) {
  pending_ += text;
  Step(out, false);
}

void HarmonyParser::Finish(ParsedOutput& out) { Step(out, true); }

void HarmonyParser::Step(ParsedOutput& out, bool final) {
  for (bool progress = true; progress && !pending_.empty();) {
    switch (state_) {
      case State::kHeader: progress = StepHeader(out, final); break;
      case State::kBody: progress = StepBody(out, final); break;
      case State::kText:
        out.content += pending_;
        pending_.clear();
        progress = false;
        break;
    }
  }
}

bool HarmonyParser::StepHeader(ParsedOutput& out, bool final) {
  const size_t message_at = pending_.find(kMessage);
  if (message_at == std::string::npos) {
    if (final || !MayBeHeader(pending_) || pending_.size() > kMaxHeader) GiveUp(out);
    return state_ == State::kText;
  }
  if (!BeginMessage(std::string_view(pending_).substr(0, message_at), out)) {
    GiveUp(out);
    return true;
  }
  pending_.erase(0, message_at + kMessage.size());
  state_ = State::kBody;
  return true;
}

bool HarmonyParser::BeginMessage(std::string_view header, ParsedOutput& out) {
  const std::optional<Header> parsed = ParseHeader(header);
  if (!parsed) return false;
  if (parsed->recipient.empty()) {
    channel_ = parsed->channel == "analysis" ? Channel::kReasoning : Channel::kContent;
    return true;
  }
  // Only function calls, and only where tools were offered; built-in tools stay text.
  if (!tools_ || !parsed->recipient.starts_with(kFunctionsPrefix)) return false;
  std::string name(parsed->recipient.substr(kFunctionsPrefix.size()));
  if (name.empty()) return false;
  out.tool_calls.push_back(
      {num_calls_, NewToolCallId(ToolCallFormat::kHarmony, random_), std::move(name), ""});
  ++num_calls_;
  channel_ = Channel::kToolCall;
  return true;
}

bool HarmonyParser::StepBody(ParsedOutput& out, bool final) {
  const std::string_view text = pending_;
  EarliestMarker none;
  none.safe_end = text.size();
  const EarliestMarker end = FindEarliest(text, kNextHeader, FindEarliest(text, kBodyEnds, none));
  if (end.at == std::string_view::npos) {
    const size_t emit = final ? text.size() : end.safe_end;
    EmitBody(text.substr(0, emit), out);
    pending_.erase(0, emit);
    return false;
  }
  EmitBody(text.substr(0, end.at), out);
  const bool next_header = end.marker == kStart || end.marker == kChannel;
  pending_.erase(0, end.at + (next_header ? 0 : end.marker.size()));
  state_ = State::kHeader;
  return true;
}

void HarmonyParser::EmitBody(std::string_view text, ParsedOutput& out) {
  if (text.empty()) return;
  switch (channel_) {
    case Channel::kReasoning: out.reasoning += text; break;
    case Channel::kContent: out.content += text; break;
    case Channel::kToolCall:
      out.tool_calls.push_back({num_calls_ - 1, "", "", std::string(text)});
      break;
  }
}

void HarmonyParser::GiveUp(ParsedOutput& out) {
  out.content += pending_;
  pending_.clear();
  state_ = State::kText;
}

}  // namespace tokenmill
