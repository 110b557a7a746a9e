// Per-tenant limits on what the gateway sends the servers: requests in flight
// (--tenant-max-concurrent) and tokens a minute (--tenant-tokens-per-minute), or what the
// tenant's lines in --api-key-file say instead, so that one tenant cannot take every backend
// slot or the whole token rate.
//
// Tokens a minute is a token bucket per tenant that holds at most one minute's tokens and
// refills continuously. A request reserves its upper bound of generated tokens when it is
// admitted (max_tokens times its sequences; 0 where it has no max_tokens), and when it ends
// its reservation is replaced by what it used: its prompt tokens plus the tokens generated.
// It is admitted while the bucket holds its reservation (at most a full bucket), so the
// bucket may go below zero once a request used more than it reserved: that tenant's next
// requests then wait (429, Retry-After) until the refill covers the debt.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>

#include "gateway/http/http_error.h"
#include "gateway/tenants/key_table.h"

namespace tokenmill::gateway {

struct TenantLimits {
  int64_t max_concurrent = 0;     // 0: no limit
  int64_t tokens_per_minute = 0;  // 0: no limit
};

class TenantLimiter {
 public:
  using Clock = std::chrono::steady_clock;

 private:
  struct State {  // one tenant's
    int64_t in_flight = 0;
    int64_t tokens_per_minute = 0;  // the limit its bucket last had (0: none)
    double tokens = 0;              // in the bucket; below 0: debt
    Clock::time_point refilled;
  };

 public:

  explicit TenantLimiter(TenantLimits limits) : limits_(limits) {}

  // One admitted request: holds its slot and its reservation until it is destroyed, which
  // frees the slot and charges the tokens it used (Used; none if never said) instead.
  class Admission {
   public:
    Admission() = default;  // admits nothing (no limiter)
    Admission(Admission&& other) noexcept { *this = std::move(other); }
    Admission& operator=(Admission&& other) noexcept;
    ~Admission();

    // The tokens the request used so far (prompt + generated); the last call counts.
    void Used(int64_t tokens) { used_ = tokens; }
    // Frees the slot and settles the tokens now (the destructor does it at Clock::now()).
    void End(Clock::time_point now);

   private:
    friend class TenantLimiter;
    TenantLimiter* limiter_ = nullptr;
    State* state_ = nullptr;
    int64_t reserved_ = 0;
    int64_t used_ = 0;
  };

  // Admits a request of `tenant` reserving `reserved_tokens`, or says why not: 429 naming the
  // limit, with Retry-After. The tenant's own limits (from its key's line) replace the flags'.
  std::variant<Admission, HttpError> Admit(const Tenant& tenant, int64_t reserved_tokens,
                                           Clock::time_point now);

  // Requests of `tenant` in flight now (for tests and metrics).
  int64_t InFlight(const std::string& tenant) const;

 private:
  // Refills `state` up to `now` at its rate. mutex_ held.
  static void Refill(State& state, Clock::time_point now);

  const TenantLimits limits_;
  mutable std::mutex mutex_;
  // By tenant name; entries live as long as the limiter (there are as many as the key file
  // names), so admissions may point at them.
  std::unordered_map<std::string, std::unique_ptr<State>> states_;
};

}  // namespace tokenmill::gateway
