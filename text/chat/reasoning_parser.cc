#include "text/chat/reasoning_parser.h"

#include "text/chat/marker_scan.h"

namespace tokenmill {

bool TemplateHasThinkTags(std::string_view template_source) {
  return template_source.find(kThinkOpen) != std::string_view::npos &&
         template_source.find(kThinkClose) != std::string_view::npos;
}

bool PromptOpensThink(std::string_view prompt) {
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  if (end == std::string_view::npos) return false;
  return prompt.substr(0, end + 1).ends_with(kThinkOpen);
}

void ReasoningParser::Feed(std::string_view text, std::string& reasoning, std::string& content) {
  pending_ += text;
  Step(reasoning, content, /*final=*/false);
}

void ReasoningParser::Finish(std::string& reasoning, std::string& content) {
  Step(reasoning, content, /*final=*/true);
  (state_ == State::kReasoning ? reasoning : content) += pending_;
  pending_.clear();
}

void ReasoningParser::Step(std::string& reasoning, std::string& content, bool final) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // Leading whitespace, then <think> opens the reasoning; anything else is content.
        const size_t start = pending_.find_first_not_of(" \t\r\n");
        if (start == std::string::npos) {
          if (!final) return;
          state_ = State::kContent;
          break;
        }
        const std::string_view rest = std::string_view(pending_).substr(start);
        if (rest.starts_with(kThinkOpen)) {
          pending_.erase(0, start + kThinkOpen.size());
          state_ = State::kReasoning;
        } else if (kThinkOpen.starts_with(rest) && !final) {
          return;  // maybe <think>, split
        } else {
          state_ = State::kContent;
        }
        break;
      }
      case State::kReasoning: {
        size_t which = 0;
        const MarkerScan scan = ScanForMarkers(pending_, reasoning_ends_, which);
        reasoning.append(pending_, 0, scan.safe_end);
        if (!scan.found) {
          pending_.erase(0, scan.safe_end);
          return;
        }
        if (which > 0) {  // a call's marker: the calls are content
          pending_.erase(0, scan.safe_end);
          state_ = State::kContent;
          break;
        }
        pending_.erase(0, scan.safe_end + kThinkClose.size());
        state_ = State::kAfterReasoning;
        break;
      }
      case State::kAfterReasoning: {
        // The blank lines between </think> and the answer belong to neither.
        const size_t start = pending_.find_first_not_of(" \t\r\n");
        if (start == std::string::npos) {
          pending_.clear();
          if (!final) return;
        } else {
          pending_.erase(0, start);
        }
        state_ = State::kContent;
        break;
      }
      case State::kContent:
        content += pending_;
        pending_.clear();
        return;
    }
  }
}

}  // namespace tokenmill
