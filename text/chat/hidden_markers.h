// Removes markers from streamed text: the tool-call markers that are control tokens in the
// model's vocabulary reach the parser as text, and never the user's content. A piece that
// may be a marker's beginning is held back until the next one tells.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tokenmill {

class HiddenMarkers {
 public:
  explicit HiddenMarkers(std::vector<std::string> markers) : markers_(std::move(markers)) {}

  // The text of `text` (after what was held back) without the markers.
  std::string Filter(std::string_view text);
  // The stream ended: what was held back.
  std::string Finish();

  bool empty() const { return markers_.empty(); }

 private:
  std::vector<std::string> markers_;
  std::string pending_;
};

}  // namespace tokenmill
