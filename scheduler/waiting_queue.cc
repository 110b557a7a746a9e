#include "scheduler/waiting_queue.h"

#include "common/check.h"

namespace tokenmill {

WaitingQueue::Entry WaitingQueue::EntryOf(const Request* request) {
  return Entry{request->priority, request->arrival_order, const_cast<Request*>(request)};
}

void WaitingQueue::Push(Request* request) {
  const bool inserted = queue_.insert(EntryOf(request)).second;
  TM_CHECK(inserted) << "request " << request->id << " queued twice (or arrival order reused)";
}

Request* WaitingQueue::Front() const {
  TM_CHECK(!queue_.empty());
  return queue_.begin()->request;
}

void WaitingQueue::PopFront() {
  TM_CHECK(!queue_.empty());
  queue_.erase(queue_.begin());
}

bool WaitingQueue::Remove(const Request* request) {
  const auto it = queue_.find(EntryOf(request));
  if (it == queue_.end() || it->request != request) return false;
  queue_.erase(it);
  return true;
}

}  // namespace tokenmill
