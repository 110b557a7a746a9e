// Waiting requests in the order they are admitted, shared fairly between tenants: each
// tenant's requests by priority (smaller first), then arrival; across tenants, the next is
// the first by (priority, the tenant's running sequences, arrival) among the tenants' heads,
// so a tenant with fewer sequences in the batch goes first among equal priorities. With one
// tenant that is priority, then arrival. A preempted request keeps its arrival order, so it
// comes back at the front of its priority: everything of that priority still waiting arrived
// after it was admitted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "scheduler/request.h"
#include "scheduler/tenant_counts.h"

namespace tokenmill {

class WaitingQueue {
 public:
  // Not owned; the request must stay alive while queued.
  void Push(Request* request);
  // The next to admit, given each tenant's running sequences. O(tenants waiting).
  Request* Front(const TenantCounts& running) const;
  // Returns false when the request is not queued.
  bool Remove(const Request* request);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Waiting requests of one tenant, and the tenants with any.
  size_t size_of(std::string_view tenant) const;
  size_t num_tenants() const { return queues_.size(); }
  // Tenant by tenant, each front to back.
  template <typename F>
  void ForEach(F&& visit) const {
    for (const auto& [tenant, queue] : queues_) {
      for (const Entry& entry : queue) visit(*entry.request);
    }
  }

 private:
  struct Entry {
    int priority;
    uint64_t arrival_order;
    Request* request;
    bool operator<(const Entry& other) const {
      return std::tie(priority, arrival_order) < std::tie(other.priority, other.arrival_order);
    }
  };
  static Entry EntryOf(const Request* request);

  std::map<std::string, std::set<Entry>, std::less<>> queues_;  // by tenant, none empty
  size_t size_ = 0;
};

}  // namespace tokenmill
