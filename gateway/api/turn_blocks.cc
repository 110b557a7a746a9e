#include "gateway/api/turn_blocks.h"

#include <algorithm>
#include <cctype>

namespace tokenmill::gateway {

namespace {

bool AllSpace(const std::string& text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace

std::vector<TurnBlocks::Event> TurnBlocks::Add(const v1::GenerateResponse& response) {
  std::vector<Event> events;
  if (!response.reasoning_text().empty()) {
    Piece(TurnBlock::Kind::kReasoning, response.reasoning_text(), nullptr, events);
  }
  if (!response.text().empty()) Piece(TurnBlock::Kind::kText, response.text(), nullptr, events);
  for (const v1::ToolCallDelta& call : response.tool_calls()) {
    Piece(TurnBlock::Kind::kToolCall, call.arguments(), &call, events);
  }
  return events;
}

std::vector<TurnBlocks::Event> TurnBlocks::Finish() {
  std::vector<Event> events;
  if (open_) events.push_back({Event::Type::kStop, blocks_.size() - 1, ""});
  open_ = false;
  return events;
}

void TurnBlocks::Piece(TurnBlock::Kind kind, const std::string& text,
                       const v1::ToolCallDelta* call, std::vector<Event>& events) {
  const bool same = open_ && blocks_.back().kind == kind &&
                    (call == nullptr || blocks_.back().call_index == call->index());
  std::string delta = text;
  if (!same && kind == TurnBlock::Kind::kText) {
    if (AllSpace(text)) {
      pending_space_ += text;
      return;
    }
    delta = pending_space_ + text;
  }
  pending_space_.clear();
  if (!same) {
    if (open_) events.push_back({Event::Type::kStop, blocks_.size() - 1, ""});
    TurnBlock& block = blocks_.emplace_back();
    block.kind = kind;
    if (call != nullptr) {
      block.call_index = call->index();
      block.call_id = call->id();
      block.call_name = call->name();
    }
    open_ = true;
    events.push_back({Event::Type::kStart, blocks_.size() - 1, ""});
  }
  if (delta.empty()) return;
  blocks_.back().text += delta;
  events.push_back({Event::Type::kDelta, blocks_.size() - 1, std::move(delta)});
}

bool TurnBlocks::has_tool_calls() const {
  return std::any_of(blocks_.begin(), blocks_.end(), [](const TurnBlock& block) {
    return block.kind == TurnBlock::Kind::kToolCall;
  });
}

}  // namespace tokenmill::gateway
