// A byte range of a text, e.g. where a rendered chat's markup lies.
#pragma once

#include <cstddef>

namespace tokenmill {

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

}  // namespace tokenmill
