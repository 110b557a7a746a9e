// Finding a marker in streamed text: how much of the text is surely not (part of) the marker.
#pragma once

#include <algorithm>
#include <span>
#include <string_view>

namespace tokenmill {

struct MarkerScan {
  bool found = false;
  // Found: where the marker starts. Otherwise: the text before a suffix that may be the
  // marker's beginning (held back until the next piece tells).
  size_t safe_end = 0;
};

inline MarkerScan ScanForMarker(std::string_view text, std::string_view marker) {
  if (const size_t at = text.find(marker); at != std::string_view::npos) return {true, at};
  for (size_t keep = std::min(text.size(), marker.size() - 1); keep > 0; --keep) {
    if (marker.starts_with(text.substr(text.size() - keep))) {
      return {false, text.size() - keep};
    }
  }
  return {false, text.size()};
}

// The earliest of several markers (`which`: its index), or the text before a suffix that may
// begin any of them.
inline MarkerScan ScanForMarkers(std::string_view text, std::span<const std::string_view> markers,
                                 size_t& which) {
  MarkerScan first{false, text.size()};
  for (size_t i = 0; i < markers.size(); ++i) {
    const MarkerScan scan = ScanForMarker(text, markers[i]);
    if (scan.found && (!first.found || scan.safe_end < first.safe_end)) {
      first = scan;
      which = i;
    } else if (!first.found && !scan.found) {
      first.safe_end = std::min(first.safe_end, scan.safe_end);
    }
  }
  return first;
}

}  // namespace tokenmill
