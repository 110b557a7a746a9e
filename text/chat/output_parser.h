// One sequence's chat output parsed as it streams: reasoning split off first, then tool
// calls out of the content. What the server sends as reasoning_text, text and tool_calls.
#pragma once

#include <optional>
#include <string_view>

#include "text/chat/reasoning_parser.h"
#include "text/chat/tool_call_parser.h"

namespace tokenmill {

struct OutputParserOptions {
  std::optional<ToolCallFormat> tool_calls;  // none: no tools offered, no call parsing
  bool reasoning = false;                    // split <think>...</think>
  bool starts_in_reasoning = false;          // the prompt opened <think>
  bool parallel = true;                      // false: calls after the first are dropped
  uint64_t seed = 0;                         // tool-call ids
};

class OutputParser {
 public:
  explicit OutputParser(const OutputParserOptions& options);

  ParsedOutput Feed(std::string_view text);
  ParsedOutput Finish();

  bool called_tools() const { return tools_ && tools_->num_calls() > 0; }

 private:
  void FeedContent(std::string_view content, ParsedOutput& out);
  // Without parallel calls, the deltas of calls after the first are dropped.
  void KeepAllowedCalls(ParsedOutput& out) const;

  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
  bool parallel_ = true;
};

}  // namespace tokenmill
