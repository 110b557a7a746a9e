#include "text/chat/hidden_markers.h"

#include <algorithm>

#include "text/chat/marker_scan.h"

namespace tokenmill {

std::string HiddenMarkers::Filter(std::string_view text) {
  pending_ += text;
  std::string out;
  for (;;) {
    // The earliest marker found; else how much of the text no marker may begin in.
    size_t first = std::string::npos;
    size_t length = 0;
    size_t safe_end = pending_.size();
    for (const std::string& marker : markers_) {
      const MarkerScan scan = ScanForMarker(pending_, marker);
      if (scan.found && scan.safe_end < first) {
        first = scan.safe_end;
        length = marker.size();
      }
      if (!scan.found) safe_end = std::min(safe_end, scan.safe_end);
    }
    if (first == std::string::npos) {
      out.append(pending_, 0, safe_end);
      pending_.erase(0, safe_end);
      return out;
    }
    out.append(pending_, 0, first);
    pending_.erase(0, first + length);
  }
}

std::string HiddenMarkers::Finish() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace tokenmill
