// Finding a marker in streamed text: how much of the text is surely not (part of) the marker.
#pragma once

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

}  // namespace tokenmill
