// The LoRA adapters a model serves, by name: each name's engine id (GenerateRequest::lora).
// --lora's adapters are ids 1, 2, ... in flag order; POST /v1/load_lora_adapter adds more at
// run time (server/grpc/lora_admin.h) and /v1/unload_lora_adapter takes them away. Ids are
// never reused, so an id still in a running request or a KV event names its own adapter after
// an unload. Any thread.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tokenmill::server {

class LoraTable {
 public:
  struct Entry {
    std::string name;
    int id = 0;
    std::string path;  // the adapter's file
  };

  // At most `max_live` adapters at once (--max-loras); `startup` (name, path each: --lora's)
  // served from the start as ids 1, 2, ...
  explicit LoraTable(size_t max_live,
                     const std::vector<std::pair<std::string, std::string>>& startup = {});

  // The adapters served now, in the order they came.
  std::vector<Entry> Live() const;
  std::vector<std::string> Names() const;
  std::optional<int> IdOf(std::string_view name) const;
  // Each id ever given, by id (index id - 1; "" for none): for the metrics and KV events.
  std::vector<std::string> NamesById() const;
  size_t max_live() const { return max_live_; }

  // Whether `name` could be added now: FailedPrecondition when an adapter has it,
  // ResourceExhausted when max_live are served.
  Status CheckRoom(std::string_view name) const;
  // A fresh id for `name`, not yet served: give it to the engine, then Publish it.
  int NewId(const std::string& name);
  // `entry` (its id from NewId) is served from now on.
  void Publish(Entry entry);
  // Takes `name` away; its id, or NotFound.
  StatusOr<int> Remove(std::string_view name);

 private:
  mutable std::mutex mutex_;
  const size_t max_live_;
  std::vector<Entry> live_;
  std::map<int, std::string> names_by_id_;
  int next_id_ = 1;
};

}  // namespace tokenmill::server
