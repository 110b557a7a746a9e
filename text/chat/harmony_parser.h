// gpt-oss's output in OpenAI's harmony format, parsed as it streams. Each message is a header
// ([<|start|>assistant][ to=R]<|channel|>C[ to=R][ <|constrain|>json]) then <|message|> and
// its body, which ends at <|end|>, <|call|>, <|return|> or where the next header starts (the
// tokenizer drops <|end|>, a control token, while rendering the header markers as llama.cpp
// does). Channel analysis is reasoning; commentary to=functions.NAME a tool call whose body
// is its arguments; final (and commentary without a recipient, a preamble) content. Markers
// split across pieces are held back until they can be told apart from text. Output that does
// not start as a header, a header that does not parse, or a call no tools were offered for
// stays text, markup included, to the end.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "text/chat/tool_call_parser.h"

namespace tokenmill {

// Whether a chat template writes harmony's markup (gpt-oss).
bool TemplateUsesHarmony(std::string_view template_source);

class HarmonyParser {
 public:
  // `tools`: tool calls were offered (else a call stays text). `seed`: the calls' ids.
  HarmonyParser(bool tools, uint64_t seed);

  void Feed(std::string_view text, ParsedOutput& out);
  // The output ended: what was held back, as its message's channel (or text).
  void Finish(ParsedOutput& out);

  int num_calls() const { return num_calls_; }

 private:
  enum class State { kHeader, kBody, kText };
  enum class Channel { kReasoning, kContent, kToolCall };

  void Step(ParsedOutput& out, bool final);
  bool StepHeader(ParsedOutput& out, bool final);
  bool StepBody(ParsedOutput& out, bool final);
  // Parses a complete header (the text before <|message|>); false where it is malformed.
  bool BeginMessage(std::string_view header, ParsedOutput& out);
  void EmitBody(std::string_view text, ParsedOutput& out);
  // The rest of the output is text: the pending markup first.
  void GiveUp(ParsedOutput& out);

  const bool tools_;
  std::mt19937_64 random_;
  State state_ = State::kHeader;
  Channel channel_ = Channel::kContent;
  std::string pending_;
  int num_calls_ = 0;
};

}  // namespace tokenmill
