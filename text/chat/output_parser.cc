#include "text/chat/output_parser.h"

namespace tokenmill {

OutputParser::OutputParser(const OutputParserOptions& options)
    : hidden_(options.hidden_markers), parallel_(options.parallel) {
  if (options.harmony || options.tool_calls == ToolCallFormat::kHarmony) {
    harmony_.emplace(options.tool_calls.has_value(), options.seed);
    return;
  }
  if (options.reasoning) {
    reasoning_.emplace(options.starts_in_reasoning,
                       options.tool_calls ? ToolCallOpeners(*options.tool_calls)
                                          : std::vector<std::string_view>());
  }
  if (options.tool_calls) tools_.emplace(*options.tool_calls, options.seed);
}

void OutputParser::FeedContent(std::string_view content, ParsedOutput& out) {
  if (turn_over()) return;
  if (tools_) {
    tools_->Feed(content, out);
    KeepAllowedCalls(out);
  } else {
    out.content += content;
  }
}

void OutputParser::KeepAllowedCalls(ParsedOutput& out) const {
  if (parallel_) return;
  std::erase_if(out.tool_calls, [](const ToolCallDelta& delta) { return delta.index > 0; });
}

ParsedOutput OutputParser::Feed(std::string_view text) {
  ParsedOutput out;
  if (harmony_) {
    harmony_->Feed(text, out);
    KeepAllowedCalls(out);
    return out;
  }
  if (!reasoning_) {
    FeedContent(text, out);
  } else {
    std::string content;
    reasoning_->Feed(text, out.reasoning, content);
    FeedContent(content, out);
  }
  if (!hidden_.empty()) out.content = hidden_.Filter(out.content);
  return out;
}

ParsedOutput OutputParser::Finish() {
  ParsedOutput out;
  if (harmony_) {
    harmony_->Finish(out);
    KeepAllowedCalls(out);
    return out;
  }
  if (reasoning_) {
    std::string content;
    reasoning_->Finish(out.reasoning, content);
    FeedContent(content, out);
  }
  if (tools_ && !turn_over()) {
    tools_->Finish(out);
    KeepAllowedCalls(out);
  }
  if (!hidden_.empty()) {
    out.content = hidden_.Filter(out.content);
    out.content += hidden_.Finish();
  }
  return out;
}

}  // namespace tokenmill
