#include "server/grpc/json_log_formatter.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>

namespace tokenmill::server {
namespace {

std::string UtcTimestamp(spdlog::log_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto whole_seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const std::time_t seconds = static_cast<std::time_t>(whole_seconds.count());
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[48];
  const size_t n = std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(buffer + n, sizeof(buffer) - n, ".%03dZ", static_cast<int>(millis));
  return buffer;
}

}  // namespace

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  const nlohmann::json record = {
      {"time", UtcTimestamp(msg.time)},
      {"level", std::string(level.data(), level.size())},
      {"message", std::string(msg.payload.data(), msg.payload.size())},
  };
  // Invalid UTF-8 in a message becomes U+FFFD rather than an exception.
  const std::string line =
      record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

}  // namespace tokenmill::server
