// Logging setup: spdlog's default logger, configured once by each binary's main().
#pragma once

#include <string_view>

#include "common/status.h"

namespace tokenmill {

// level: trace|debug|info|warn|error|off. Logs go to stderr.
Status SetupLogging(std::string_view level);

}  // namespace tokenmill
