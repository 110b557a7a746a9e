// --log-json: each log record as one JSON object per line,
// {"time":"2026-01-02T03:04:05.678Z","level":"info","message":"..."}, for log collectors.
#pragma once

#include <spdlog/formatter.h>

#include <memory>

namespace tokenmill::server {

class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace tokenmill::server
