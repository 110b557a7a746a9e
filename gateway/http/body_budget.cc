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
  if (refused_) return false;
  if (!budget_.TryTake(bytes)) {
    // The body is dropped (BudgetedBody frees its text): what it held goes back now, not
    // once its connection has written the 503 and closed, so the bodies still arriving get
    // it (else two bodies overflowing together were both refused while one would do).
    refused_ = true;
    budget_.Give(bytes_);
    bytes_ = 0;
    return false;
  }
  bytes_ += bytes;
  return true;
}

}  // namespace tokenmill::gateway
