// The environment variable that may set a command-line flag: "--max-queue" with prefix
// "TOKENMILL_" is TOKENMILL_MAX_QUEUE.
#pragma once

#include <string>
#include <string_view>

namespace tokenmill {

std::string EnvNameOfFlag(std::string_view prefix, std::string_view flag);

}  // namespace tokenmill
