#include "gateway/api/ignored_fields.h"

#include <spdlog/spdlog.h>

namespace tokenmill::gateway {

bool IgnoredFieldLog::Note(std::string_view route, const IgnoredField& field) {
  std::string key(route);
  key += ' ';
  key += field.name;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!seen_.insert(std::move(key)).second) return false;
  }
  spdlog::info("{}: accepting and ignoring `{}`: {} (logged once)", route, field.name, field.why);
  return true;
}

}  // namespace tokenmill::gateway
