#include "gateway/http/body_budget.h"

namespace tokenmill::gateway {

bool BodyBudget::TryTake(size_t bytes) {
  size_t used = in_use_.load(std::memory_order_relaxed);
  do {
    if (bytes > max_bytes_ - used) return false;
  } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

bool BodyCharge::Grow(size_t bytes) {
  if (refused_ || !budget_.TryTake(bytes)) {
    refused_ = true;
    return false;
  }
  bytes_ += bytes;
  return true;
}

}  // namespace tokenmill::gateway
