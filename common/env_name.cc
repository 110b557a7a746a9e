#include "common/env_name.h"

#include <cctype>

namespace tokenmill {

std::string EnvNameOfFlag(std::string_view prefix, std::string_view flag) {
  while (!flag.empty() && flag.front() == '-') flag.remove_prefix(1);
  std::string name(prefix);
  for (const char c : flag) {
    name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

}  // namespace tokenmill
