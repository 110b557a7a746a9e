// Deep nesting for the request fuzzers. Mutating bytes never builds 100000 levels of JSON (the
// inputs are at most 8 KB), and that depth is what overflowed the stack (issue 35): an input
// that begins with kDeepJsonMarker names a depth and a shape in its next bytes, and the fuzzer
// puts that many levels where the rest of the input says. Seeds with the marker are committed
// (tests/fuzz/corpus/*/deep-*), so each run starts from them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tokenmill::fuzz {

inline constexpr uint8_t kDeepJsonMarker = 0xFE;

struct DeepJson {
  std::string text;        // `depth` levels of the shape around a 1
  uint8_t selector = 0;    // which field the fuzzer puts it in
  std::string_view rest;   // the rest of the input
};

// For an input that begins with the marker: [marker][depth: 2 bytes, x 4][shape][selector].
// Depths reach 262140: past the stack of any walk that recurses once per level.
inline bool TakeDeepJson(const uint8_t* data, size_t size, DeepJson& out) {
  if (size < 5 || data[0] != kDeepJsonMarker) return false;
  const size_t depth = 4 * (size_t{data[1]} | size_t{data[2]} << 8);
  // Lists, objects, both, and objects as JSON text inside a JSON string (tool arguments).
  static constexpr std::string_view kOpen[] = {"[", "{\"a\":", "{\"a\":[", "{\\\"a\\\":"};
  static constexpr std::string_view kClose[] = {"]", "}", "]}", "}"};
  const size_t shape = data[3] % 4;
  out.text.clear();
  out.text.reserve(depth * (kOpen[shape].size() + kClose[shape].size()) + 1);
  for (size_t i = 0; i < depth; ++i) out.text += kOpen[shape];
  out.text += '1';
  for (size_t i = 0; i < depth; ++i) out.text += kClose[shape];
  out.selector = data[4];
  out.rest = std::string_view(reinterpret_cast<const char*>(data) + 5, size - 5);
  return true;
}

// `text` with every "@@" replaced by `deep`: where a JSON body holds the nesting.
inline std::string ReplaceMarks(std::string_view text, const std::string& deep) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 2) == "@@") {
      out += deep;
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace tokenmill::fuzz
