// Splits a reasoning model's output into reasoning and content as it streams:
// <think>...</think> (Qwen3, DeepSeek-R1 distills), tags removed. A template that opens
// <think> in the prompt makes the output start inside the reasoning, with no opening tag.
// Tags split across pieces are held back until they can be told apart from text. A model
// that opens its tool calls inside the reasoning without closing it (Kimi K2 Thinking) ends
// the reasoning with the calls' marker (`call_openers`), which stays for the content.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenmill {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// Whether the chat template uses <think> tags.
bool TemplateHasThinkTags(std::string_view template_source);
// Whether a rendered prompt ends inside an open <think> (the output starts in the reasoning).
bool PromptOpensThink(std::string_view prompt);

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning,
                           std::vector<std::string_view> call_openers = {})
      : state_(starts_in_reasoning ? State::kReasoning : State::kStart),
        reasoning_ends_(std::move(call_openers)) {
    reasoning_ends_.insert(reasoning_ends_.begin(), kThinkClose);
  }

  // Appends the next piece's reasoning and content.
  void Feed(std::string_view text, std::string& reasoning, std::string& content);
  // The output ended: what was held back.
  void Finish(std::string& reasoning, std::string& content);

  // Whether the reasoning is over (a constrained output may start).
  bool reasoning_done() const { return state_ == State::kContent; }

 private:
  enum class State { kStart, kReasoning, kAfterReasoning, kContent };
  void Step(std::string& reasoning, std::string& content, bool final);

  State state_;
  // </think>, then the call openers (static strings: ToolCallOpeners).
  std::vector<std::string_view> reasoning_ends_;
  std::string pending_;
};

}  // namespace tokenmill
