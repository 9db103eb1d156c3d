// kiln::Status and kiln::StatusOr<T>: how every call of the client library reports an error —
// a code a program can branch on and a message a person can act on.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "kiln/export.h"

namespace kiln {

// Stable numbers: the C ABI's kiln_status uses the same values.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // a bad tensor, parameter or request (nothing was launched)
  kNotFound = 2,            // unknown op, entry point not in the cubin, cache entry missing
  kFailedPrecondition = 3,  // e.g. the op cannot be built for this GPU's arch; JIT off and a miss
  kUnavailable = 4,         // the daemon cannot be reached
  kDeadlineExceeded = 5,    // the daemon did not answer in time
  kDataLoss = 6,            // a cubin failed its SHA-256 check
  kNoDriver = 7,            // no usable CUDA driver (libcuda.so.1) or no GPU
  kCudaError = 8,           // a CUDA driver call failed
  kInternal = 9,            // a bug in Kiln (or the daemon said INTERNAL)
  kUnimplemented = 10,
  kResourceExhausted = 11,
  kPermissionDenied = 12,
  kUnknown = 13,
};

KILN_API const char* StatusCodeName(StatusCode code);  // "INVALID_ARGUMENT"

class KILN_API Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;  // "OK" or "INVALID_ARGUMENT: input: ..."

  // Puts `context` in front of the message ("loading rmsnorm: " + message); OK stays OK.
  Status WithContext(const std::string& context) const;
  // The same for a literal, inline so that an OK status (every successful op call) builds no
  // std::string from it.
  Status WithContext(const char* context) const { return ok() ? *this : WithContext(std::string(context)); }

  friend bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_ && a.message_ == b.message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

// A value or the reason there is none. Constructing from an OK status is a bug and becomes
// kInternal.
template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT: implicit, like absl::StatusOr
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "StatusOr constructed from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    if (const Status* s = std::get_if<Status>(&v_)) return *s;
    static const Status kOk;
    return kOk;
  }

  // Only when ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace kiln

// Returns the status of `expr` from the enclosing function when it is not OK.
#define KILN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kiln::Status kiln_status_ = (expr);        \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

// Declares or assigns `lhs` from the value of `expr` (a StatusOr), or returns its status from
// the enclosing function:  KILN_ASSIGN_OR_RETURN(const Plan plan, MakePlan(...));
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_STATUS_CONCAT_(kiln_status_or_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
#define KILN_STATUS_CONCAT_INNER_(a, b) a##b
#define KILN_STATUS_CONCAT_(a, b) KILN_STATUS_CONCAT_INNER_(a, b)
