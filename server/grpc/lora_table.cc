#include "server/grpc/lora_table.h"

#include <algorithm>

namespace tokenmill::server {

LoraTable::LoraTable(size_t max_live,
                     const std::vector<std::pair<std::string, std::string>>& startup)
    : max_live_(max_live) {
  for (const auto& [name, path] : startup) {
    names_by_id_[next_id_] = name;
    live_.push_back({name, next_id_++, path});
  }
}

std::vector<LoraTable::Entry> LoraTable::Live() const {
  std::lock_guard lock(mutex_);
  return live_;
}

std::vector<std::string> LoraTable::Names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const Entry& entry : live_) names.push_back(entry.name);
  return names;
}

std::optional<int> LoraTable::IdOf(std::string_view name) const {
  std::lock_guard lock(mutex_);
  for (const Entry& entry : live_) {
    if (entry.name == name) return entry.id;
  }
  return std::nullopt;
}

std::vector<std::string> LoraTable::NamesById() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> names(static_cast<size_t>(next_id_ - 1));
  for (const auto& [id, name] : names_by_id_) names[static_cast<size_t>(id - 1)] = name;
  return names;
}

Status LoraTable::CheckRoom(std::string_view name) const {
  std::lock_guard lock(mutex_);
  if (std::ranges::any_of(live_, [&](const Entry& entry) { return entry.name == name; })) {
    return FailedPreconditionError("a LoRA adapter is called '" + std::string(name) +
                              "' already: unload it first, or choose another name");
  }
  if (live_.size() >= max_live_) {
    return ResourceExhaustedError(std::to_string(live_.size()) +
                                  " LoRA adapters are loaded, as many as --max-loras allows: "
                                  "unload one first");
  }
  return OkStatus();
}

int LoraTable::NewId(const std::string& name) {
  std::lock_guard lock(mutex_);
  names_by_id_[next_id_] = name;
  return next_id_++;
}

void LoraTable::Publish(Entry entry) {
  std::lock_guard lock(mutex_);
  live_.push_back(std::move(entry));
}

StatusOr<int> LoraTable::Remove(std::string_view name) {
  std::lock_guard lock(mutex_);
  const auto it =
      std::ranges::find_if(live_, [&](const Entry& entry) { return entry.name == name; });
  if (it == live_.end()) {
    return NotFoundError("no LoRA adapter is called '" + std::string(name) + "'");
  }
  const int id = it->id;
  live_.erase(it);
  return id;
}

}  // namespace tokenmill::server
