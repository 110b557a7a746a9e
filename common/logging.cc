#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

namespace tokenmill {

Status SetupLogging(std::string_view level) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgumentError("unknown log level '" + std::string(level) +
                                "': use trace, debug, info, warn, error or off");
  }
  // Logs go to stderr so stdout stays free for a command's output.
  auto logger = spdlog::stderr_color_mt("tokenmill");
  logger->set_level(parsed);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  spdlog::set_default_logger(std::move(logger));
  return OkStatus();
}

}  // namespace tokenmill
