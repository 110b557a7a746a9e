#include "gateway/tenants/tenant_limiter.h"

#include <algorithm>
#include <cmath>

namespace tokenmill::gateway {

TenantLimiter::Admission& TenantLimiter::Admission::operator=(Admission&& other) noexcept {
  if (this != &other) {
    if (limiter_ != nullptr) End(Clock::now());
    limiter_ = std::exchange(other.limiter_, nullptr);
    state_ = std::exchange(other.state_, nullptr);
    reserved_ = other.reserved_;
    used_ = other.used_;
  }
  return *this;
}

TenantLimiter::Admission::~Admission() {
  if (limiter_ != nullptr) End(Clock::now());
}

void TenantLimiter::Admission::End(Clock::time_point now) {
  if (limiter_ == nullptr) return;
  TenantLimiter& limiter = *std::exchange(limiter_, nullptr);
  std::lock_guard lock(limiter.mutex_);
  --state_->in_flight;
  if (state_->tokens_per_minute > 0) {
    Refill(*state_, now);
    state_->tokens = std::min(state_->tokens + static_cast<double>(reserved_ - used_),
                              static_cast<double>(state_->tokens_per_minute));
  }
}

void TenantLimiter::Refill(State& state, Clock::time_point now) {
  if (now > state.refilled) {
    const double seconds = std::chrono::duration<double>(now - state.refilled).count();
    const double per_minute = static_cast<double>(state.tokens_per_minute);
    state.tokens = std::min(state.tokens + seconds * per_minute / 60.0, per_minute);
    state.refilled = now;
  }
}

std::variant<TenantLimiter::Admission, HttpError> TenantLimiter::Admit(const Tenant& tenant,
                                                                       int64_t reserved_tokens,
                                                                       Clock::time_point now) {
  const int64_t max_concurrent = tenant.max_concurrent.value_or(limits_.max_concurrent);
  const int64_t tokens_per_minute =
      tenant.tokens_per_minute.value_or(limits_.tokens_per_minute);
  const std::string who =
      tenant.name.empty() ? "this gateway's clients" : "tenant '" + tenant.name + "'";
  std::lock_guard lock(mutex_);
  std::unique_ptr<State>& slot = states_[tenant.name];
  if (slot == nullptr) {
    slot = std::make_unique<State>();
    slot->refilled = now;
  }
  State& state = *slot;
  if (max_concurrent > 0 && state.in_flight >= max_concurrent) {
    return MakeError(429,
                     who + " already has " + std::to_string(state.in_flight) +
                         " requests in flight, the most " +
                         (tenant.max_concurrent ? std::string("max-concurrent in --api-key-file")
                                                : std::string("--tenant-max-concurrent")) +
                         " (" + std::to_string(max_concurrent) +
                         ") allows: wait for one to finish",
                     "rate_limit_error", "", "tenant_concurrency_limit", 1);
  }
  if (tokens_per_minute != state.tokens_per_minute) {  // first request, or a reloaded limit
    Refill(state, now);
    state.tokens = state.tokens_per_minute == 0
                       ? static_cast<double>(tokens_per_minute)  // starts full
                       : std::min(state.tokens, static_cast<double>(tokens_per_minute));
    state.tokens_per_minute = tokens_per_minute;
    state.refilled = now;
  }
  if (tokens_per_minute > 0) {
    Refill(state, now);
    const double capacity = static_cast<double>(tokens_per_minute);
    // A request that reserves more than a minute's tokens waits for a full bucket.
    const double needed = std::max(std::min(static_cast<double>(reserved_tokens), capacity),
                                   std::nextafter(0.0, 1.0));
    if (state.tokens < needed) {
      const int retry_after = std::max(
          static_cast<int>(std::ceil((needed - state.tokens) * 60.0 / capacity)), 1);
      return MakeError(429,
                       who + " used its tokens for now: " +
                           (tenant.tokens_per_minute
                                ? std::string("tokens-per-minute in --api-key-file")
                                : std::string("--tenant-tokens-per-minute")) +
                           " is " + std::to_string(tokens_per_minute) +
                           " (prompt + generated tokens; max_tokens is reserved when a request "
                           "starts); retry after " +
                           std::to_string(retry_after) + " s",
                       "rate_limit_error", "", "tenant_token_limit", retry_after);
    }
    state.tokens -= static_cast<double>(reserved_tokens);
  }
  ++state.in_flight;
  Admission admission;
  admission.limiter_ = this;
  admission.state_ = &state;
  admission.reserved_ = tokens_per_minute > 0 ? reserved_tokens : 0;
  return admission;
}

int64_t TenantLimiter::InFlight(const std::string& tenant) const {
  std::lock_guard lock(mutex_);
  const auto it = states_.find(tenant);
  return it == states_.end() ? 0 : it->second->in_flight;
}

}  // namespace tokenmill::gateway
