// DeepSeek's and Kimi K2's tool calls: a section of marked calls, each a head (the name, or
// Kimi's id) then a separator marker and the arguments object, as their templates write them:
//   DeepSeek V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
//                  <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   DeepSeek V3/R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n
//                  ```json\n{...}\n```<｜tool▁call▁end｜>\n...<｜tool▁calls▁end｜>
//   Kimi K2:       <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
//                  <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
// (without the line breaks shown). ToolCallParser's section steps parse them
// (section_tool_calls.cc); as llama.cpp's parsers, DeepSeek's also take a call without its
// <｜tool▁call▁begin｜>, Kimi's a call without the section's marker or its end marker.
#pragma once

#include <string_view>

#include "text/chat/tool_call_parser.h"

namespace tokenmill {

struct SectionMarkup {
  std::string_view section_begin;
  std::string_view section_end;
  std::string_view call_begin;
  std::string_view call_end;
  std::string_view separator;  // between a call's head and its arguments
};

inline constexpr SectionMarkup kDeepSeekMarkup = {
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};
inline constexpr SectionMarkup kKimiK2Markup = {
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_end|>", "<|tool_call_argument_begin|>"};

inline bool IsSectionFormat(ToolCallFormat format) {
  return format == ToolCallFormat::kDeepSeekV3 || format == ToolCallFormat::kDeepSeekV31 ||
         format == ToolCallFormat::kKimiK2;
}

// A section format's markup.
inline const SectionMarkup& SectionMarkupOf(ToolCallFormat format) {
  return format == ToolCallFormat::kKimiK2 ? kKimiK2Markup : kDeepSeekMarkup;
}

}  // namespace tokenmill
