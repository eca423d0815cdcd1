// Status and Result<T>: the error model for code that can fail on expected, outside causes
// (bad input, a missing file, a peer gone). A failure carries a small code, so callers branch
// on what kind of failure it is (s.code() == StatusCode::kNotFound), never on its message, and
// a message for people. Both are [[nodiscard]]: a failure must be handled or explicitly
// ignored. Any thread may use them; they hold no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace trainscope {

// What kind of failure a Status is. Stages pick the code; the HTTP stage alone maps codes to
// HTTP statuses (http::httpStatusOf, collector/http/api.h).
enum class StatusCode : uint8_t {
  kOk = 0,
  kError,            // not classified further (a store or system error, our own bug)
  kInvalidArgument,  // bad input from outside: a field, a flag, a parameter
  kNotFound,         // what was named does not exist
  kConflict,         // a valid request the current state refuses (already running, too late)
  kTooLarge,         // over a size limit
  kMalformed,        // bytes that do not parse (a frame, a file)
  kUnsupported,      // a version or feature this build does not speak
  kUnavailable,      // a part that is switched off or not connected
};

// The code's name in lower case ("not_found"), for logs and labels.
inline const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kError:
      return "error";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kConflict:
      return "conflict";
    case StatusCode::kTooLarge:
      return "too_large";
    case StatusCode::kMalformed:
      return "malformed";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kUnavailable:
      return "unavailable";
  }
  return "error";
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  // A failure of `code` (not kOk) with a message for people.
  static Status error(StatusCode code, std::string message) {
    return Status(code == StatusCode::kOk ? StatusCode::kError : code, std::move(message));
  }
  static Status error(std::string message) { return error(StatusCode::kError, std::move(message)); }
  static Status invalidArgument(std::string message) {
    return error(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status notFound(std::string message) {
    return error(StatusCode::kNotFound, std::move(message));
  }
  static Status conflict(std::string message) {
    return error(StatusCode::kConflict, std::move(message));
  }
  static Status unavailable(std::string message) {
    return error(StatusCode::kUnavailable, std::move(message));
  }

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the reason there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : value_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  static Result error(std::string message) { return Result(Status::error(std::move(message))); }
  static Result error(StatusCode code, std::string message) {
    return Result(Status::error(code, std::move(message)));
  }

  bool isOk() const { return std::holds_alternative<T>(value_); }
  explicit operator bool() const { return isOk(); }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // The failure; only meaningful when !isOk().
  Status status() const { return isOk() ? Status::ok() : std::get<Status>(value_); }
  StatusCode code() const { return isOk() ? StatusCode::kOk : std::get<Status>(value_).code(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return isOk() ? kEmpty : std::get<Status>(value_).message();
  }

 private:
  std::variant<T, Status> value_;
};

}  // namespace trainscope
