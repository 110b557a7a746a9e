#include "common/json_nesting.h"

namespace tokenmill {

bool JsonTextNestsDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included, is inside the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

std::string JsonNestingRefusal(std::string_view field, int limit) {
  return std::string(field) + " nests deeper than " + std::to_string(limit) +
         " levels of lists and objects";
}

}  // namespace tokenmill
