// One sequence's chat output parsed as it streams: reasoning split off first, then tool
// calls out of the content. What the server sends as reasoning_text, text and tool_calls.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat/harmony_parser.h"
#include "text/chat/hidden_markers.h"
#include "text/chat/reasoning_parser.h"
#include "text/chat/tool_call_parser.h"

namespace tokenmill {

struct OutputParserOptions {
  std::optional<ToolCallFormat> tool_calls;  // none: no tools offered, no call parsing
  bool reasoning = false;                    // split <think>...</think>
  bool starts_in_reasoning = false;          // the prompt opened <think>
  bool harmony = false;  // gpt-oss's channels: HarmonyParser (reasoning and calls, if offered)
  bool parallel = true;                      // false: the turn ends with the first call
  // Markers that are control tokens in the model's vocabulary (ToolCallMarkers): rendered
  // for the tool-call parser, never shown in the content.
  std::vector<std::string> hidden_markers = {};
  uint64_t seed = 0;                         // tool-call ids
};

class OutputParser {
 public:
  explicit OutputParser(const OutputParserOptions& options);

  ParsedOutput Feed(std::string_view text);
  ParsedOutput Finish();

  bool called_tools() const {
    return (tools_ && tools_->num_calls() > 0) || (harmony_ && harmony_->num_calls() > 0);
  }
  // Without parallel calls, the first call is complete: nothing after it is wanted (the
  // server ends the generation), and nothing after it is parsed. Harmony's later calls are
  // dropped instead (KeepAllowedCalls).
  bool turn_over() const { return !parallel_ && tools_ && tools_->num_complete_calls() > 0; }

 private:
  void FeedContent(std::string_view content, ParsedOutput& out);
  // Without parallel calls, the deltas of calls after the first are dropped.
  void KeepAllowedCalls(ParsedOutput& out) const;

  std::optional<HarmonyParser> harmony_;  // set: it parses everything, reasoning_ and tools_ not
  std::optional<ReasoningParser> reasoning_;
  HiddenMarkers hidden_;
  std::optional<ToolCallParser> tools_;
  bool parallel_ = true;
};

}  // namespace tokenmill
