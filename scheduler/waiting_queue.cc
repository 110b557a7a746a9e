#include "scheduler/waiting_queue.h"

#include "common/check.h"

namespace tokenmill {

WaitingQueue::Entry WaitingQueue::EntryOf(const Request* request) {
  return Entry{request->priority, request->arrival_order, const_cast<Request*>(request)};
}

void WaitingQueue::Push(Request* request) {
  const bool inserted = queues_[request->tenant].insert(EntryOf(request)).second;
  TM_CHECK(inserted) << "request " << request->id << " queued twice (or arrival order reused)";
  ++size_;
}

Request* WaitingQueue::Front(const TenantCounts& running) const {
  TM_CHECK(size_ > 0);
  const Entry* best = nullptr;
  int best_running = 0;
  for (const auto& [tenant, queue] : queues_) {
    const Entry& head = *queue.begin();
    const int num_running = running.Get(tenant);
    if (best == nullptr || std::tie(head.priority, num_running, head.arrival_order) <
                               std::tie(best->priority, best_running, best->arrival_order)) {
      best = &head;
      best_running = num_running;
    }
  }
  return best->request;
}

bool WaitingQueue::Remove(const Request* request) {
  const auto queue = queues_.find(request->tenant);
  if (queue == queues_.end()) return false;
  const auto it = queue->second.find(EntryOf(request));
  if (it == queue->second.end() || it->request != request) return false;
  queue->second.erase(it);
  if (queue->second.empty()) queues_.erase(queue);
  --size_;
  return true;
}

size_t WaitingQueue::size_of(std::string_view tenant) const {
  const auto queue = queues_.find(tenant);
  return queue == queues_.end() ? 0 : queue->second.size();
}

}  // namespace tokenmill
