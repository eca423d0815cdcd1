// Status and Result<T>: the error model for code that can fail on expected, outside causes
// (bad input, a missing file, a peer gone). Any thread may use them; they hold no shared state.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace trainscope {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool isOk() const { return !failed_; }
  explicit operator bool() const { return isOk(); }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

// A value or the reason there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : value_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  static Result error(std::string message) { return Result(Status::error(std::move(message))); }

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
  const std::string& message() const {
    static const std::string kEmpty;
    return isOk() ? kEmpty : std::get<Status>(value_).message();
  }

 private:
  std::variant<T, Status> value_;
};

}  // namespace trainscope
