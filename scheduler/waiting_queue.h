// Waiting requests in the order they are admitted: priority (smaller first), then arrival.
// A preempted request keeps its arrival order, so it comes back at the front of its
// priority: everything of that priority still waiting arrived after it was admitted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>

#include "scheduler/request.h"

namespace tokenmill {

class WaitingQueue {
 public:
  // Not owned; the request must stay alive while queued.
  void Push(Request* request);
  Request* Front() const;
  void PopFront();
  // Returns false when the request is not queued.
  bool Remove(const Request* request);

  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  // Front to back.
  template <typename F>
  void ForEach(F&& visit) const {
    for (const Entry& entry : queue_) visit(*entry.request);
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

  std::set<Entry> queue_;
};

}  // namespace tokenmill
