#include "gateway/api/responses/response_store.h"

namespace tokenmill::gateway {

void ResponseStore::Put(const std::string& id, const std::string& tenant,
                        std::vector<v1::ChatMessage> conversation, std::string response,
                        std::string input_items, Clock::time_point now) {
  size_t bytes = id.size() + tenant.size() + response.size() + input_items.size();
  for (const v1::ChatMessage& message : conversation) bytes += message.ByteSizeLong();
  std::lock_guard lock(mutex_);
  while (!entries_.empty() && entries_.front().expires <= now) EraseFront();
  if (const auto old = by_id_.find(id); old != by_id_.end()) {
    bytes_ -= old->second->bytes;
    entries_.erase(old->second);
    by_id_.erase(old);
  }
  if (bytes > limits_.max_bytes || limits_.max_entries == 0) return;
  while (!entries_.empty() &&
         (entries_.size() >= limits_.max_entries || bytes_ + bytes > limits_.max_bytes)) {
    EraseFront();
  }
  entries_.push_back(
      {id, tenant, now + limits_.ttl, std::move(conversation), std::move(response),
       std::move(input_items), bytes});
  by_id_[id] = std::prev(entries_.end());
  bytes_ += bytes;
}

const ResponseStore::Entry* ResponseStore::Find(const std::string& id,
                                                const std::string& tenant,
                                                Clock::time_point now) const {
  const auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second->expires <= now || it->second->tenant != tenant) {
    return nullptr;
  }
  return &*it->second;
}

std::optional<std::vector<v1::ChatMessage>> ResponseStore::Get(const std::string& id,
                                                               const std::string& tenant,
                                                               Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  const Entry* entry = Find(id, tenant, now);
  if (entry == nullptr) return std::nullopt;
  return entry->conversation;
}

std::optional<std::string> ResponseStore::GetResponse(const std::string& id,
                                                      const std::string& tenant,
                                                      Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  const Entry* entry = Find(id, tenant, now);
  if (entry == nullptr) return std::nullopt;
  return entry->response;
}

std::optional<std::string> ResponseStore::GetInputItems(const std::string& id,
                                                        const std::string& tenant,
                                                        Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  const Entry* entry = Find(id, tenant, now);
  if (entry == nullptr) return std::nullopt;
  return entry->input_items;
}

bool ResponseStore::Erase(const std::string& id, const std::string& tenant,
                          Clock::time_point now) {
  std::lock_guard lock(mutex_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second->tenant != tenant) return false;
  const bool live = it->second->expires > now;
  bytes_ -= it->second->bytes;
  entries_.erase(it->second);
  by_id_.erase(it);
  return live;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

void ResponseStore::EraseFront() {
  bytes_ -= entries_.front().bytes;
  by_id_.erase(entries_.front().id);
  entries_.pop_front();
}

}  // namespace tokenmill::gateway
