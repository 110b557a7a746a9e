// Finds stop strings in streamed text and holds back what may be the start of one, so a
// stop string split across tokens is never emitted (OpenAI / vLLM semantics: the text
// before the stop string is returned, the stop string is not).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tokenmill {

class StopStringMatcher {
 public:
  // Each stop string must be non-empty.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;                   // safe to emit now
    std::optional<size_t> matched;      // index of the stop string found; text precedes it
  };

  // Appends streamed text. Without a match, returns all of the text except its longest
  // tail that starts some stop string. With one, returns the text before the earliest match;
  // the matcher must then not be used again.
  Result Add(std::string_view text);

  // Ends the stream: what was held back.
  std::string Flush();

  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;  // not yet emitted
};

}  // namespace tokenmill
