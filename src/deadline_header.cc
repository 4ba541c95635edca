#include "bulwark/deadline_header.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace bulwark {

namespace {

constexpr std::size_t kMaxDigits = 8;

bool is_space(char c) noexcept { return c == ' ' || c == '\t'; }
bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

// Nanoseconds per unit, 0 for an unknown one.
std::int64_t unit_ns(char u) noexcept {
  switch (u) {
    case 'H':
      return 3'600'000'000'000;
    case 'M':
      return 60'000'000'000;
    case 'S':
      return 1'000'000'000;
    case 'm':
      return 1'000'000;
    case 'u':
      return 1'000;
    case 'n':
      return 1;
    default:
      return 0;
  }
}

}  // namespace

std::string_view to_string(DeadlineHeaderError e) noexcept {
  switch (e) {
    case DeadlineHeaderError::empty:
      return "empty";
    case DeadlineHeaderError::negative:
      return "negative";
    case DeadlineHeaderError::not_a_number:
      return "not a number";
    case DeadlineHeaderError::too_many_digits:
      return "more than 8 digits";
    case DeadlineHeaderError::missing_unit:
      return "no unit (H, M, S, m, u or n)";
    case DeadlineHeaderError::unknown_unit:
      return "unknown unit (H, M, S, m, u or n)";
    case DeadlineHeaderError::too_large:
      return "too large";
  }
  return "unknown";
}

Expected<Nanos, DeadlineHeaderError> parse_timeout_header(std::string_view v,
                                                          DeadlineHeaderFormat format) noexcept {
  while (!v.empty() && is_space(v.front())) v.remove_prefix(1);
  while (!v.empty() && is_space(v.back())) v.remove_suffix(1);
  if (v.empty()) return Unexpected(DeadlineHeaderError::empty);
  if (v.front() == '-') return Unexpected(DeadlineHeaderError::negative);
  std::size_t digits = 0;
  while (digits < v.size() && is_digit(v[digits])) ++digits;
  if (digits == 0) return Unexpected(DeadlineHeaderError::not_a_number);
  if (digits > kMaxDigits) return Unexpected(DeadlineHeaderError::too_many_digits);
  std::int64_t n = 0;
  for (std::size_t i = 0; i < digits; ++i) n = n * 10 + (v[i] - '0');
  const std::string_view rest = v.substr(digits);
  std::int64_t per = 1'000'000;  // milliseconds
  if (format == DeadlineHeaderFormat::milliseconds) {
    if (!rest.empty()) return Unexpected(DeadlineHeaderError::not_a_number);
  } else {
    if (rest.empty()) return Unexpected(DeadlineHeaderError::missing_unit);
    // "1.5m" is not a number; "10ms", "10x", "10 m" have no unit this format knows.
    if (rest[0] == '.' || rest[0] == ',') return Unexpected(DeadlineHeaderError::not_a_number);
    per = rest.size() == 1 ? unit_ns(rest[0]) : 0;
    if (per == 0) return Unexpected(DeadlineHeaderError::unknown_unit);
  }
  if (n > std::numeric_limits<std::int64_t>::max() / per)
    return Unexpected(DeadlineHeaderError::too_large);
  return Nanos(n * per);
}

Expected<Deadline, DeadlineHeaderError> parse_deadline_header(
    std::string_view value, Nanos margin, Ticks now, DeadlineHeaderFormat format) noexcept {
  auto t = parse_timeout_header(value, format);
  if (!t) return Unexpected(t.error());
  const Ticks left =
      std::max<Ticks>(0, saturating_sub(t->count(), std::max<Ticks>(0, margin.count())));
  // Saturates below "never": a header always gives a finite deadline.
  return Deadline::at(std::min(saturating_add(now, left), kTicksMax - 1));
}

std::string format_timeout_header(Nanos remaining, DeadlineHeaderFormat format) {
  const std::int64_t ns = std::max<std::int64_t>(0, remaining.count());
  constexpr std::int64_t kMax = 99'999'999;  // 8 digits
  if (format == DeadlineHeaderFormat::milliseconds)
    return std::to_string(std::min(kMax, ns / 1'000'000));
  if (ns < 1'000) return std::to_string(ns) + "n";
  if (ns < 1'000'000) return std::to_string(ns / 1'000) + "u";
  struct Unit {
    std::int64_t per;
    char name;
  };
  for (const Unit u : {Unit{1'000'000, 'm'}, Unit{1'000'000'000, 'S'}, Unit{60'000'000'000, 'M'}}) {
    if (ns / u.per <= kMax) return std::to_string(ns / u.per) + u.name;
  }
  return std::to_string(std::min(kMax, ns / 3'600'000'000'000)) + "H";
}

}  // namespace bulwark
