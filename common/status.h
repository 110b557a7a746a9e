// Status and StatusOr: how expected failures travel (bad input, bad file).
// Programmer errors are CHECKs instead (common/check.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/check.h"

namespace tokenmill {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kOutOfRange,
  kFailedPrecondition,
  kResourceExhausted,
  kUnavailable,
  kUnimplemented,
  kDataLoss,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return {}; }
inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    TM_CHECK(!status_.ok()) << "StatusOr built from an OK status without a value";
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { return CheckedValue(); }
  const T& value() const& { return const_cast<StatusOr*>(this)->CheckedValue(); }
  T&& value() && { return std::move(CheckedValue()); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  T& CheckedValue() {
    TM_CHECK(ok()) << "value() of a failed StatusOr: " << status_.ToString();
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace tokenmill

#define TM_STATUS_CONCAT_INNER(a, b) a##b
#define TM_STATUS_CONCAT(a, b) TM_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define TM_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::tokenmill::Status tm_status_ = (expr);             \
    if (!tm_status_.ok()) return tm_status_;      \
  } while (0)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define TM_ASSIGN_OR_RETURN(lhs, expr) \
  TM_ASSIGN_OR_RETURN_IMPL(TM_STATUS_CONCAT(tm_statusor_, __LINE__), lhs, expr)
#define TM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
