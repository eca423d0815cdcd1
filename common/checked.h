// Checked integer arithmetic for sizes and ranges computed from outside input (a request's
// step range, a sender's world size): an overflow is an empty optional, never a wrapped value
// that passes a later bound check. Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

namespace trainscope {

template <typename T>
std::optional<T> checkedAdd(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <typename T>
std::optional<T> checkedSub(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T out{};
  if (__builtin_sub_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <typename T>
std::optional<T> checkedMul(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The number of integers in [from, to] (to - from + 1), or nothing when to < from or the
// count does not fit in an int64_t.
inline std::optional<int64_t> inclusiveCount(int64_t from, int64_t to) {
  if (to < from) return std::nullopt;
  auto span = checkedSub(to, from);
  if (!span) return std::nullopt;
  return checkedAdd<int64_t>(*span, 1);
}

}  // namespace trainscope
