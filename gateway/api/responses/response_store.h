// The conversations of stored Responses (OpenAI's `store`, true by default), for later requests
// that continue one with previous_response_id. Each entry keeps the messages that request
// continues from: the stored response's input after its instructions (which OpenAI does not
// carry over), the conversation it continued itself, and its output; and the response object
// as it was sent (GET /v1/responses/{id}) with its input items (GET .../input_items). Bounded by the number of
// entries, their bytes (the oldest go first) and their age; held in memory only, so a restart
// forgets them. Each entry is its tenant's: asked for by another tenant it is not there (the
// same answer as an id never stored, so an id tells nothing about another tenant's data).
// Thread-safe: connections on every I/O thread share the gateway's one store.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

class ResponseStore {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    size_t max_entries = 10000;
    size_t max_bytes = size_t{64} << 20;  // of the messages, as protobuf bytes
    std::chrono::seconds ttl{3600};
  };

  explicit ResponseStore(Limits limits) : limits_(limits) {}

  const Limits& limits() const { return limits_; }

  // Keeps `conversation`, `response` (the response object's JSON) and `input_items` (the
  // JSON list of its input items) under `id` for `tenant` until now + ttl, dropping the oldest
  // entries while the store is over its limits. One larger than max_bytes is not kept.
  void Put(const std::string& id, const std::string& tenant,
           std::vector<v1::ChatMessage> conversation, std::string response,
           std::string input_items, Clock::time_point now);
  // The conversation kept under `id` for `tenant`; none when it was never stored, is another
  // tenant's, has expired, was dropped for room or deleted.
  std::optional<std::vector<v1::ChatMessage>> Get(const std::string& id,
                                                  const std::string& tenant,
                                                  Clock::time_point now) const;
  // The response object kept under `id`, as Get.
  std::optional<std::string> GetResponse(const std::string& id, const std::string& tenant,
                                         Clock::time_point now) const;
  // The input items kept under `id`, as Get.
  std::optional<std::string> GetInputItems(const std::string& id, const std::string& tenant,
                                           Clock::time_point now) const;
  // Forgets `id` of `tenant`; false when there was nothing (live, of `tenant`) to forget.
  bool Erase(const std::string& id, const std::string& tenant, Clock::time_point now);

  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    std::string tenant;
    Clock::time_point expires;
    std::vector<v1::ChatMessage> conversation;
    std::string response;
    std::string input_items;
    size_t bytes = 0;
  };
  // The live entry of `id` of `tenant`, or null. mutex_ held.
  const Entry* Find(const std::string& id, const std::string& tenant,
                    Clock::time_point now) const;
  void EraseFront();  // mutex_ held

  const Limits limits_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // oldest first (every entry lives as long: expiry order too)
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  size_t bytes_ = 0;
};

}  // namespace tokenmill::gateway
