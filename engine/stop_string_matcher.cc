#include "engine/stop_string_matcher.h"

#include <algorithm>

#include "common/check.h"

namespace tokenmill {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  for (const std::string& stop : stop_strings_) TM_CHECK(!stop.empty());
}

StopStringMatcher::Result StopStringMatcher::Add(std::string_view text) {
  held_.append(text);
  Result result;
  // The earliest match wins (then the longer stop string, for equal starts). A match can
  // only lie within held_: emitted text never ends with the start of a stop string.
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t pos = held_.find(stop_strings_[i]);
    if (pos == std::string::npos) continue;
    if (pos < best_pos ||
        (pos == best_pos && stop_strings_[i].size() > stop_strings_[*result.matched].size())) {
      best_pos = pos;
      result.matched = i;
    }
  }
  if (result.matched) {
    result.text = held_.substr(0, best_pos);
    held_.clear();
    return result;
  }
  // Hold back the longest tail of held_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t longest = std::min(stop.size() - 1, held_.size());
    for (size_t k = longest; k > hold; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  result.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return result;
}

std::string StopStringMatcher::Flush() {
  std::string rest;
  rest.swap(held_);
  return rest;
}

}  // namespace tokenmill
