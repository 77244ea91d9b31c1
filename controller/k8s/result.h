// Errors as values for the Kubernetes client: an ApiError carries the HTTP code and the
// server's Status reason and message; Result<T> holds either a value or an ApiError.
// No exceptions cross this boundary.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tessera::k8s {

// What went wrong with one API call. `code` is the HTTP status, or 0 when no response came
// back (connection refused, TLS failure, timeout, cancelled): then `reason` is "Transport",
// "Timeout" or "Cancelled".
struct ApiError {
  int code = 0;
  std::string reason;   // metav1.Status.reason: NotFound, Conflict, AlreadyExists, Expired ...
  std::string message;  // metav1.Status.message, or the transport's own description

  bool IsNotFound() const { return code == 404; }
  // A write lost an optimistic-concurrency race (stale resourceVersion): re-read and retry.
  bool IsConflict() const { return code == 409 && reason != "AlreadyExists"; }
  bool IsAlreadyExists() const { return code == 409 && reason == "AlreadyExists"; }
  // The requested resourceVersion is too old (compacted): relist.
  bool IsGone() const { return code == 410 || reason == "Expired" || reason == "Gone"; }
  bool IsInvalid() const { return code == 422; }
  bool IsTransport() const { return code == 0; }
  // Worth retrying as is: no response, throttled, or a server-side failure.
  bool IsRetryable() const { return code == 0 || code == 429 || code >= 500; }

  // One line: "409 Conflict: the object has been modified ...".
  std::string ToString() const {
    std::string s = code == 0 ? std::string("transport") : std::to_string(code);
    if (!reason.empty())
      s += " " + reason;
    if (!message.empty())
      s += ": " + message;
    return s;
  }
};

// Either a T or an ApiError (E). Cheap to move; value() on an error is a programming error.
// A value type: not synchronised.
template <typename T, typename E = ApiError>
class Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit
  Result(E error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<0>(v_); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  const E& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, E> v_;
};

// Success or an ApiError, for calls that return nothing.
class Status {
 public:
  Status() = default;
  Status(ApiError error) : error_(std::move(error)) {}  // NOLINT: implicit
  static Status Ok() { return Status(); }
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const ApiError& error() const { return *error_; }

 private:
  std::optional<ApiError> error_;
};

}  // namespace tessera::k8s
