// An assistant turn as the agent APIs show it: a list of blocks in the order the model produced
// them (reasoning, text, one per tool call), Anthropic's content blocks and the Responses API's
// output items. Built from a sequence's responses (the server has parsed reasoning and tool
// calls out of the text); a streamed turn is a sequence of start, delta and stop events.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

struct TurnBlock {
  enum class Kind { kReasoning, kText, kToolCall };
  Kind kind = Kind::kText;
  std::string text;  // the reasoning, the text or the call's arguments (JSON text)
  std::string call_id;
  std::string call_name;
  size_t call_index = 0;  // the server's index of the call
};

class TurnBlocks {
 public:
  struct Event {
    enum class Type { kStart, kDelta, kStop };
    Type type = Type::kStart;
    size_t block = 0;   // its position in blocks()
    std::string delta;  // kDelta: what it adds to the block's text
  };

  // The events of one response. Within a response reasoning comes first, then text, then
  // tool calls; a piece of another kind (or call) than the open block stops it and starts the
  // next. Whitespace with no text block open waits for text to follow (it is dropped when a
  // block of another kind comes first: the newlines between reasoning and a call).
  std::vector<Event> Add(const v1::GenerateResponse& response);
  // Stops the open block.
  std::vector<Event> Finish();

  const std::vector<TurnBlock>& blocks() const { return blocks_; }
  bool has_tool_calls() const;

 private:
  void Piece(TurnBlock::Kind kind, const std::string& text, const v1::ToolCallDelta* call,
             std::vector<Event>& events);

  std::vector<TurnBlock> blocks_;
  bool open_ = false;  // the last block is open
  std::string pending_space_;
};

}  // namespace tokenmill::gateway
